package protocol_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/internal/storecount"
)

// failFirstMulti fails the first Multi of more than 20 operations (a
// shared leave Multi) without applying it.
type failFirstMulti struct {
	*storecount.Store
	on     atomic.Bool
	failed atomic.Bool
}

func (s *failFirstMulti) Multi(ctx context.Context, ops ...store.Op) ([]store.OpResult, error) {
	if s.on.Load() && len(ops) > 20 && s.failed.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("failFirstMulti: %w", store.ErrBadVersion)
	}
	return s.Store.Multi(ctx, ops...)
}

// TestCloseLeavesJobsTogether: Registry.Close leaves many jobs with their
// offline writes in a few shared transactions (issue 15 item 1: Stop of
// 10,000 jobs), and every job is left as its own Leave leaves it: the
// server's status node and election candidate gone, the membership version
// bumped, the resharding flag raised so the other server, now leader,
// takes every item. When a shared transaction fails, its jobs leave one by
// one with the same outcome.
func TestCloseLeavesJobsTogether(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharedMultiFails=%v", fail), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { closeLeavesJobsTogether(t, fail) })
		})
	}
}

func closeLeavesJobsTogether(t *testing.T, fail bool) {
	const jobs = 300
	srv := memstore.NewServer()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st1 := &failFirstMulti{Store: storecount.New(srv.Connect())}
	st2 := srv.Connect()
	raw := srv.Connect()
	defer func() { _, _, _ = st1.Close(), st2.Close(), raw.Close() }()
	reg1, err := protocol.NewRegistry(st1, protocol.RegistryConfig{Namespace: "ns", ServerID: "s1", HostName: "h1", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	reg2, err := protocol.NewRegistry(st2, protocol.RegistryConfig{Namespace: "ns", ServerID: "s2", HostName: "h2", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("j%03d", i) }
	for i := range jobs {
		if _, err := reg1.Join(t.Context(), coordtest.Config(name(i), 4)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range jobs {
		if _, err := reg2.Join(t.Context(), coordtest.Config(name(i), 4)); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait()
	ctx := context.Background()
	members := make([]int32, jobs)
	for i := range jobs {
		host, _, err := raw.Get(ctx, "/ns/"+name(i)+"/leader/election/host")
		if err != nil || string(host) != "s1" {
			t.Fatalf("%s: leader %q (%v), want s1, the first to join", name(i), host, err)
		}
		_, stat, err := raw.Exists(ctx, "/ns/"+name(i)+"/servers")
		if err != nil {
			t.Fatal(err)
		}
		members[i] = stat.Version
	}

	st1.on.Store(fail)
	before := st1.Counts()
	if err := reg1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := st1.Counts().Sub(before)
	// 300 jobs: 3 shared Multis (128 jobs each at most); with the first
	// failing, its 128 jobs leave one by one (a Multi each).
	if fail && !st1.failed.Load() {
		t.Fatal("no shared leave Multi was sent")
	}
	if want := int64(3); !fail && c.Multis > want {
		t.Errorf("Close of %d jobs sent %d Multis, want at most %d", jobs, c.Multis, want)
	}
	synctest.Wait()
	for i := range jobs {
		p := "/ns/" + name(i)
		if ok, _, _ := raw.Exists(ctx, p+"/servers/s1/status"); ok {
			t.Errorf("%s: s1's status node is still there after Close", name(i))
		}
		kids, _, _ := raw.Children(ctx, p+"/leader/election/latch")
		if len(kids) != 1 {
			t.Errorf("%s: election candidates %v after Close, want s2's only", name(i), kids)
		}
		if _, stat, _ := raw.Exists(ctx, p+"/servers"); stat.Version <= members[i] {
			t.Errorf("%s: membership version %d after Close, want above %d", name(i), stat.Version, members[i])
		}
		host, _, _ := raw.Get(ctx, p+"/leader/election/host")
		sharding, _, _ := raw.Get(ctx, p+"/servers/s2/sharding")
		if string(host) != "s2" || string(sharding) != "0,1,2,3" {
			t.Errorf("%s: leader %q, s2's items %q after s1 left; want s2 leading with every item", name(i), host, sharding)
		}
		if ok, _, _ := raw.Exists(ctx, p+"/leader/sharding/necessary"); ok {
			t.Errorf("%s: resharding flag still up after s2 resharded", name(i))
		}
	}
	if err := reg2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
