package recipe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
)

// recvLeader waits for the next leader id Observe reports.
func recvLeader(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case id, ok := <-ch:
		if !ok {
			t.Fatal("Observe closed its channel")
		}
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no leader change observed")
	}
	return ""
}

// The election recipe on its own: Campaign blocks until the candidate
// before it resigns or its session ends; Leader and Observe follow.
func TestElectionRecipe(t *testing.T) {
	ctx := t.Context()
	srv := memstore.NewServer()
	const dir = "/e/leader/election"
	newElection := func(id string) (*Election, *memstore.Session) {
		sess := srv.Connect()
		t.Cleanup(func() { _ = sess.Close() })
		return NewElection(sess, dir, id), sess
	}
	a, aSess := newElection("a")
	b, bSess := newElection("b")
	c, _ := newElection("c")
	if err := store.CreateAll(ctx, aSess, a.LatchPath()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader before any campaign: err = %v, want ErrNoLeader", err)
	}
	octx, stop := context.WithCancel(ctx)
	observed := c.Observe(octx)
	if id := recvLeader(t, observed); id != "" {
		t.Fatalf("first observed leader %q, want none", id)
	}

	if err := a.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	if id := recvLeader(t, observed); id != "a" {
		t.Fatalf("observed %q, want a", id)
	}
	// b stands (second in line) before its Campaign waits, so that c
	// stands behind it.
	if elected, _, err := b.Proceed(ctx, NoWatch(bSess)); err != nil || elected {
		t.Fatalf("b's first step while a leads: elected %v, err %v", elected, err)
	}
	bDone := make(chan error, 1)
	go func() { bDone <- b.Campaign(ctx) }()
	// c stands behind b; its Campaign gives up when its ctx ends.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := c.Campaign(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("c's Campaign behind a leader: err = %v, want its ctx's end", err)
	}
	cancel()
	select {
	case err := <-bDone:
		t.Fatalf("b's Campaign returned (%v) while a leads", err)
	default:
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("b's Campaign after a resigned: %v", err)
	}
	if id, err := c.Leader(ctx); err != nil || id != "b" {
		t.Fatalf("Leader = %q, %v; want b", id, err)
	}
	for id := recvLeader(t, observed); id != "b"; id = recvLeader(t, observed) {
		if id != "" {
			t.Fatalf("observed %q between a and b", id)
		}
	}
	// b's session ends: its nodes go, and c, next in line, leads.
	if err := bSess.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	for id := recvLeader(t, observed); id != "c"; id = recvLeader(t, observed) {
		if id != "" {
			t.Fatalf("observed %q between b and c", id)
		}
	}
	stop()
	for range observed {
	}
}

// The op builders put the election's writes in a transaction of the
// caller's: CampaignOps with the host node makes the caller the leader
// (Adopt; its next Proceed is elected without a request), and ResignOps
// withdraws it (Forget).
func TestElectionOpsInTheCallersTransaction(t *testing.T) {
	ctx := t.Context()
	srv := memstore.NewServer()
	a := srv.Connect()
	t.Cleanup(func() { _ = a.Close() })
	e := NewElection(a, "/e/leader/election", "a")
	if err := store.CreateAll(ctx, a, e.LatchPath()); err != nil {
		t.Fatal(err)
	}
	ops := append([]store.Op{&store.CreateOp{Path: "/e/registered"}}, e.CampaignOps(true)...)
	res, err := a.Multi(ctx, ops...)
	if err != nil {
		t.Fatal(err)
	}
	e.Adopt(res[1].Path, true)
	if !e.HostHeld() || e.Candidate() == "" {
		t.Fatalf("after Adopt: candidate %q, host held %v", e.Candidate(), e.HostHeld())
	}
	noRequest := func(context.Context, string) (bool, store.Stat, error) {
		t.Fatal("Proceed armed a watch though the transaction made it leader")
		return false, store.Stat{}, nil
	}
	if elected, _, err := e.Proceed(ctx, noRequest); !elected || err != nil {
		t.Fatalf("Proceed after the transaction: elected %v, %v", elected, err)
	}
	if id, err := e.Leader(ctx); id != "a" || err != nil {
		t.Fatalf("Leader = %q, %v; want a", id, err)
	}
	if own, _, err := e.Standing(ctx); own != e.Candidate() || err != nil {
		t.Fatalf("Standing = %q, %v; want the adopted candidate %q", own, err, e.Candidate())
	}

	sess, _ := a.Session()
	rops, err := e.ResignOps(ctx, sess)
	if err != nil || len(rops) != 2 {
		t.Fatalf("ResignOps: %d ops, %v; want the host's and the candidate's deletes", len(rops), err)
	}
	if _, err := a.Multi(ctx, append(rops, &store.DeleteOp{Path: "/e/registered", Version: store.AnyVersion})...); err != nil {
		t.Fatal(err)
	}
	e.Forget()
	if _, err := e.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader after the resign: %v, want ErrNoLeader", err)
	}
	if own, none, err := e.Standing(ctx); own != "" || !none || err != nil {
		t.Fatalf("Standing after the resign: %q, none %v, %v; want no candidate at all", own, none, err)
	}
	if ops, err := e.ResignOps(ctx, sess); ops != nil || err != nil {
		t.Fatalf("ResignOps with no candidate: %v, %v; want none", ops, err)
	}
}
