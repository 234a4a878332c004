package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/testwait"
)

func TestRunHTTP(t *testing.T) {
	type seen struct {
		method, auth, ctype string
		body                ShardContext
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.method, s.auth, s.ctype = r.Method, r.Header.Get("Authorization"), r.Header.Get("Content-Type")
		_ = json.NewDecoder(r.Body).Decode(&s.body)
		got <- s
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, strings.Repeat("x", 5000)+"upstream down")
		}
	}))
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()

	err := RunHTTP(t.Context(), client, HTTPRequest{Method: "PUT", URL: srv.URL + "/run", Header: http.Header{"Authorization": {"Bearer T"}}}, testShard)
	if err != nil {
		t.Fatalf("RunHTTP: %v", err)
	}
	s := <-got
	if s.method != "PUT" || s.auth != "Bearer T" || s.ctype != "application/json" || s.body != testShard {
		t.Fatalf("server saw %+v", s)
	}
	err = RunHTTP(t.Context(), client, HTTPRequest{URL: srv.URL + "/fail"}, testShard)
	if s := <-got; s.method != "POST" {
		t.Errorf("default method = %s, want POST", s.method)
	}
	if !errors.Is(err, ErrHTTPFailed) || !strings.Contains(err.Error(), "502") || !strings.Contains(err.Error(), "upstream down") || len(err.Error()) > 2*httpTailBytes {
		t.Fatalf("err = %v, want the 502 with the body's tail", err)
	}
}

// TestRunHTTPBoundedByContext: a request the server never answers ends
// with the item's context, and the error is its cause.
func TestRunHTTPBoundedByContext(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a gone client only after the body
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithCancelCause(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- RunHTTP(ctx, client, HTTPRequest{URL: srv.URL}, testShard) }()
	testwait.Recv(t, 20*time.Second, "the request to arrive", arrived)
	cancel(&dataflow.TimeoutError{After: 3 * time.Second})
	err := testwait.Recv(t, 20*time.Second, "RunHTTP to return", errc)
	if !errors.Is(err, dataflow.ErrTimeout) || !strings.Contains(err.Error(), "timed out after 3s") {
		t.Fatalf("err = %v, want timed out after 3s", err)
	}
}
