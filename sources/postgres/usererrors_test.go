package postgres_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/sources/postgres"
)

// A row whose own outbound call times out: the timeout is a net.Error, so
// by default it is taken for infrastructure (no attempt, the item backs
// off, the row comes back forever). Marked Permanent, in the job's code or
// in the Node's ErrorHandler, it counts an attempt and fails the row after
// MaxAttempts while the other rows are done.
func TestRowWhoseCallTimesOut(t *testing.T) {
	// An endpoint that answers only once the caller gives up.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	client := &http.Client{Timeout: 20 * time.Millisecond}
	call := func(ctx context.Context, o Order) error {
		if o.ID != 7 {
			return nil
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hang.URL+"/settle/7", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("settling order 7: %w", err)
		}
		return resp.Body.Close()
	}

	for _, tc := range []struct {
		name string
		mark func(error) error
		// wantStatus and wantAttempts are row 7's after one ProcessBatch.
		wantStatus   string
		wantAttempts int
	}{
		{"unmarked: infrastructure", func(err error) error { return err }, "pending", 0},
		{"permanent: the row's", dataflow.Permanent, "failed", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := newDB(t)
			ctx := testCtx(t)
			newOrders(t, pool, 10)
			job := newSource(t, pool, postgres.Config{MaxAttempts: 1, MaxBackoff: time.Second}).Claim(
				func(ctx context.Context, _ dataflowShard, o Order) error { return tc.mark(call(ctx, o)) })
			got, err := job.Fetch(ctx, shard(0, 1, 10, 1))
			if err != nil || len(got) != 10 {
				t.Fatalf("Fetch = %d rows, %v; want 10", len(got), err)
			}
			if _, err := job.ProcessBatch(ctx, shard(0, 1, 10, 1), got); err != nil {
				t.Fatal(err)
			}
			var status, lastErr string
			var attempts int
			if err := pool.QueryRow(ctx, `SELECT shardflow_status, shardflow_attempts, coalesce(shardflow_last_error, '') FROM orders WHERE id = 7`).Scan(&status, &attempts, &lastErr); err != nil {
				t.Fatal(err)
			}
			if status != tc.wantStatus || attempts != tc.wantAttempts {
				t.Fatalf("row 7 = %s after %d attempts (%q); want %s after %d", status, attempts, lastErr, tc.wantStatus, tc.wantAttempts)
			}
			if tc.wantStatus == "failed" && !strings.Contains(lastErr, "Client.Timeout") {
				t.Errorf("row 7's last error %q does not say the call timed out", lastErr)
			}
		})
	}
}

// Classify follows the outermost mark of user code, before its own rules.
func TestClassifyFollowsUserMarks(t *testing.T) {
	timeout := &timeoutErr{}
	for _, tc := range []struct {
		err  error
		want postgres.ErrorClass
	}{
		{timeout, postgres.ClassStatement},
		{dataflow.Permanent(timeout), postgres.ClassRow},
		{fmt.Errorf("row 3: %w", dataflow.Permanent(timeout)), postgres.ClassRow},
		{dataflow.RetryAfter(fmt.Errorf("quota"), time.Minute), postgres.ClassStatement},
		{dataflow.Permanent(dataflow.RetryAfter(timeout, time.Second)), postgres.ClassRow},
		{dataflow.RetryAfter(dataflow.Permanent(timeout), time.Second), postgres.ClassStatement},
	} {
		if got := postgres.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (*timeoutErr) Error() string   { return "i/o timeout" }
func (*timeoutErr) Timeout() bool   { return true }
func (*timeoutErr) Temporary() bool { return true }
