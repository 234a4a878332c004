package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Response body bytes kept for a failed HTTP job's error.
const httpTailBytes = 1024

// ErrHTTPFailed: an HTTP job's request got a non-2xx status.
var ErrHTTPFailed = errors.New("jobs: HTTP request failed")

// HTTPRequest is one HTTP job's request, as its config gives it.
type HTTPRequest struct {
	// Method is the request method; "" means POST.
	Method string
	// URL is the absolute URL.
	URL string
	// Header holds the extra headers (jobconfig.ParseHTTPHeaders).
	Header http.Header
}

// RunHTTP sends req once for one shard item, with c as its JSON body
// (Content-Type application/json unless the headers set one), and returns
// nil for a 2xx status. The response body is read (up to 64 KiB) and its
// last 1 KiB goes into the error of a non-2xx status, which wraps
// ErrHTTPFailed. ctx bounds the whole exchange (itemTimeout, ownership).
func RunHTTP(ctx context.Context, client *http.Client, req HTTPRequest, c ShardContext) error {
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	hreq, err := http.NewRequestWithContext(ctx, method, req.URL, bytes.NewReader(c.JSON()))
	if err != nil {
		return fmt.Errorf("jobs: HTTP %s %s: %w", method, req.URL, err)
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	if hreq.Header.Get("Content-Type") == "" {
		hreq.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(hreq)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return fmt.Errorf("jobs: HTTP %s %s: %w", method, req.URL, cause)
		}
		return fmt.Errorf("jobs: HTTP %s %s: %w", method, req.URL, err)
	}
	defer resp.Body.Close()
	body := newTail(httpTailBytes)
	_, _ = io.Copy(body, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%w: %s %s: status %s; body tail: %q", ErrHTTPFailed, method, req.URL, resp.Status, body.String())
	}
	return nil
}
