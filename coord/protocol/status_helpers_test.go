package protocol_test

import (
	"context"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/coordtest"
)

// Status helpers of the protocol tests that check a job's state through
// the operator API (coord.Admin, above this package).

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustStatus(t *testing.T, h *coordtest.Harness, job string) coord.JobStatus {
	t.Helper()
	st, err := h.Admin.Status(ctxT(t), job)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if err := coordtest.CheckItemTimes(ctxT(t), h.AdminStore, h.NS, job, st); err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

func itemNumbers(st coord.JobStatus) []int {
	out := []int{}
	for _, it := range st.Items {
		out = append(out, it.Item)
	}
	return out
}
