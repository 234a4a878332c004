package protocol_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

// TestLayoutGuard: a server of layout 2 refuses to begin while an online
// server of the job has a run record of an older release (here a
// hand-made one without "layout":2, with an ephemeral status), naming the
// upgrade rule in the error and in its lastError; once that server is
// offline it runs. Its own record says layout 2 from its registration on.
func TestLayoutGuard(t *testing.T) {
	h := coordtest.NewHarness(t, coordtest.Mem())
	a := h.Start("a", coordtest.Config("job", 4))
	coordtest.CompleteAll(t, coordtest.BeginAll(t, a)...)
	ctx := t.Context()
	own, _, err := h.AdminStore.Get(ctx, store.Join(h.NS, "job", "servers", "a", "run"))
	if err != nil || !strings.Contains(string(own), `"layout":2`) {
		t.Fatalf("a's record %s, %v; want layout 2", own, err)
	}
	old := h.B.Connect(t) // the older server's session
	srv := store.Join(h.NS, "job", "servers", "old")
	for _, n := range []struct {
		path string
		data string
		mode store.Mode
	}{
		{srv, "", store.Persistent},
		{store.Join(srv, "run"), `{"items":"0-1","begin":"1","complete":"2","vouch":true,"epoch":1}`, store.Persistent},
		{store.Join(srv, "status"), "READY", store.Ephemeral},
	} {
		if _, err := old.Create(ctx, n.path, []byte(n.data), n.mode); err != nil {
			t.Fatal(err)
		}
	}
	var berr error
	coordtest.Eventually(t, "a refusing to begin beside an older server", func() bool {
		r, err := a.Job.Begin(ctx, time.Now())
		if err == nil {
			coordtest.CompleteAll(t, r)
			return false
		}
		berr = err
		return true
	})
	if !errors.Is(berr, protocol.ErrBadConfig) || !strings.Contains(berr.Error(), "older release") {
		t.Fatalf("Begin beside an older server: %v, want ErrBadConfig naming the older release", berr)
	}
	st, err := h.Admin.Status(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Servers {
		if s.ID == "a" && !strings.Contains(s.LastError, "older release") {
			t.Fatalf("a's lastError %q, want the refusal", s.LastError)
		}
	}
	if err := old.Delete(ctx, store.Join(srv, "status"), store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	coordtest.Eventually(t, "a running once the older server is offline", func() bool {
		r, err := a.Job.Begin(ctx, time.Now())
		if err != nil {
			return false
		}
		coordtest.CompleteAll(t, r)
		return true
	})
}
