package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/shardflow/shardflow/internal/redact"
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
	// Secrets are values hidden from the errors besides the URL's query
	// and the header values (which always are): resolved secrets.
	Secrets []string
}

// secretValues are the values req's errors must not show.
func (req HTTPRequest) secretValues() []string {
	out := append([]string(nil), req.Secrets...)
	for _, vs := range req.Header {
		out = append(out, vs...)
	}
	return out
}

// RunHTTP sends req once for one shard item, with c as its JSON body
// (Content-Type application/json unless the headers set one), and returns
// nil for a 2xx status. The response body is read (up to 64 KiB) and its
// last 1 KiB goes into the error of a non-2xx status, which wraps
// ErrHTTPFailed. ctx bounds the whole exchange (itemTimeout, ownership).
//
// Errors never show a secret: the URL's query and password, the header
// values, req.Secrets and DSN-like passwords in the body are redacted
// (package redact), since errors reach logs, status and history.
func RunHTTP(ctx context.Context, client *http.Client, req HTTPRequest, c ShardContext) error {
	err := runHTTP(ctx, client, req, c)
	if err == nil {
		return nil
	}
	return &redactedError{text: redact.Text(err.Error(), req.secretValues()...), err: err}
}

// redactedError shows a redacted text and keeps the cause for errors.Is
// (ErrHTTPFailed, a timeout's cause) without exposing its text.
type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }

// Is reports e's chain's matches, without Unwrap: a caller that printed
// the unwrapped error would print the secret.
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// As is errors.As over e's chain, for typed causes (dataflow.TimeoutError).
func (e *redactedError) As(target any) bool { return errors.As(e.err, target) }

// WorkflowRunHeader carries the workflow run an HTTP job's item runs in
// (ShardContext.WorkflowRun), beside the same in the JSON body.
const WorkflowRunHeader = "Shardflow-Workflow-Run"

func runHTTP(ctx context.Context, client *http.Client, req HTTPRequest, c ShardContext) error {
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
	if c.WorkflowRun != "" {
		hreq.Header.Set(WorkflowRunHeader, c.WorkflowRun)
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
