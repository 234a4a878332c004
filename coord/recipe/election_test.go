package recipe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/storecount"
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

// A candidate created after a listing of the latch (Listing) waits on the
// last candidate listed, without listing the latch again, while it stands
// (ProceedBehind): counted, it arms one watch and reads nothing else. Once
// that candidate is gone it proceeds as Proceed does: behind a candidate
// created between the listing and its own, it waits on that one; first,
// it leads.
func TestElectionProceedBehindTheLastListed(t *testing.T) {
	ctx := t.Context()
	srv := memstore.NewServer()
	const dir = "/e/leader/election"
	stand := func(id string) (*Election, *memstore.Session) {
		t.Helper()
		sess := srv.Connect()
		t.Cleanup(func() { _ = sess.Close() })
		e := NewElection(sess, dir, id)
		res, err := sess.Multi(ctx, e.CampaignOps(false)...)
		if err != nil {
			t.Fatal(err)
		}
		e.Adopt(res[0].Path, false)
		return e, sess
	}
	boot := srv.Connect()
	t.Cleanup(func() { _ = boot.Close() })
	if err := store.CreateAll(ctx, boot, dir+"/latch"); err != nil {
		t.Fatal(err)
	}
	if last, none, err := NewElection(boot, dir, "x").Listing(ctx); last != "" || !none || err != nil {
		t.Fatalf("Listing of an empty latch: %q, none %v, %v", last, none, err)
	}
	a, _ := stand("a")
	if elected, _, err := a.Proceed(ctx, NoWatch(boot)); !elected || err != nil {
		t.Fatalf("a alone: elected %v, %v", elected, err)
	}
	b, bSess := stand("b")
	// c lists the latch (a and b), then b's successor d stands before c.
	cRaw := srv.Connect()
	t.Cleanup(func() { _ = cRaw.Close() })
	cSess := storecount.New(cRaw)
	c := NewElection(cSess, dir, "c")
	last, none, err := c.Listing(ctx)
	if err != nil || none || last != store.Base(b.Candidate()) {
		t.Fatalf("Listing: last %q, none %v, %v; want b's candidate %q", last, none, err, store.Base(b.Candidate()))
	}
	d, _ := stand("d")
	res, err := cSess.Multi(ctx, c.CampaignOps(false)...)
	if err != nil {
		t.Fatal(err)
	}
	c.Adopt(res[0].Path, false)

	var watched []string
	watch := func(ctx context.Context, p string) (bool, store.Stat, error) {
		watched = append(watched, store.Base(p))
		return cSess.Exists(ctx, p)
	}
	before := cSess.Counts()
	elected, waiting, err := c.ProceedBehind(ctx, watch, last)
	if elected || !waiting || err != nil || len(watched) != 1 || watched[0] != last {
		t.Fatalf("ProceedBehind while b stands: elected %v, waiting %v, %v, watched %v; want waiting on b's candidate only", elected, waiting, err, watched)
	}
	if n := cSess.Counts().Sub(before).Requests(); n != 1 {
		t.Fatalf("ProceedBehind while b stands made %d requests, want 1 (the watch)", n)
	}
	// b goes: c, behind d (created after its listing), waits on d.
	if err := bSess.Close(); err != nil {
		t.Fatal(err)
	}
	watched = nil
	elected, waiting, err = c.ProceedBehind(ctx, watch, last)
	if elected || !waiting || err != nil || watched[len(watched)-1] != store.Base(d.Candidate()) {
		t.Fatalf("ProceedBehind after b went: elected %v, waiting %v, %v, watched %v; want waiting on d's candidate %q", elected, waiting, err, watched, store.Base(d.Candidate()))
	}
	// a and d resign: c leads.
	for _, e := range []*Election{a, d} {
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if elected, _, err := c.ProceedBehind(ctx, watch, last); !elected || err != nil {
		t.Fatalf("ProceedBehind first in line: elected %v, %v", elected, err)
	}
}
