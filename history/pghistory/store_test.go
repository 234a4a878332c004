package pghistory_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/integration"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// run is a record of job "j" beginning at t0+begin minutes, lasting one.
func run(server string, item int, epoch int64, src history.Source, begin int) history.Record {
	b := t0.Add(time.Duration(begin) * time.Minute)
	return history.Record{Job: "j", Server: server, Item: item, Epoch: epoch, Source: src,
		Begin: b, End: b.Add(time.Minute), Success: int64(10 + begin), Failure: int64(begin % 2)}
}

func describe(recs []history.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s/%d/%d/%s/%s", r.Server, r.Item, r.Epoch, r.Source, r.Begin.Format("15:04"))
	}
	return out
}

func TestStoreWriteQueryOwnersAt(t *testing.T) {
	pool := newPool(t, integration.SharedPostgres(t))
	st := newStore(t, pghistory.Config{Pool: pool, Retention: -1})
	if err := st.Migrate(t.Context()); err != nil { // idempotent
		t.Fatalf("second Migrate: %v", err)
	}
	recs := []history.Record{
		run("a", 0, 1, history.SourceNormal, 0),
		run("a", 1, 1, history.SourceNormal, 0),
		run("a", 0, 1, history.SourceManual, 10),
		run("b", 1, 2, history.SourceFailover, 12), // b took item 1 over at 10:12
		run("b", 1, 2, history.SourceMisfire, 20),
		{Job: "other", Server: "a", Item: 0, Epoch: 9, Source: history.SourceNormal, Begin: t0, End: t0, Error: "boom"},
	}
	if err := st.Write(t.Context(), recs); err != nil {
		t.Fatal(err)
	}

	all, err := st.Runs(t.Context(), history.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := "[b/1/2/misfire/10:20 b/1/2/failover/10:12 a/0/1/manual/10:10 a/0/1/normal/10:00 a/1/1/normal/10:00 a/0/9/normal/10:00]"
	if got := fmt.Sprint(describe(all)); got != want {
		t.Fatalf("all runs newest first:\n got %s\nwant %s", got, want)
	}
	if all[0] != recs[4] {
		t.Fatalf("read back %+v, wrote %+v", all[0], recs[4])
	}
	if all[5].Error != "boom" || all[5].Job != "other" {
		t.Fatalf("record with error read back as %+v", all[5])
	}

	one := 1
	for _, tc := range []struct {
		f    history.Filter
		want string
	}{
		{history.Filter{Job: "j", Item: &one}, "[b/1/2/misfire/10:20 b/1/2/failover/10:12 a/1/1/normal/10:00]"},
		{history.Filter{Server: "a", Job: "j"}, "[a/0/1/manual/10:10 a/0/1/normal/10:00 a/1/1/normal/10:00]"},
		{history.Filter{Since: t0.Add(12 * time.Minute)}, "[b/1/2/misfire/10:20 b/1/2/failover/10:12]"},
		{history.Filter{Limit: 2}, "[b/1/2/misfire/10:20 b/1/2/failover/10:12]"},
	} {
		got, err := st.Runs(t.Context(), tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if g := fmt.Sprint(describe(got)); g != tc.want {
			t.Errorf("Runs(%+v) = %s, want %s", tc.f, g, tc.want)
		}
	}

	// Who owned each item at 10:15: item 0 a (run begun 10:10), item 1 b
	// under epoch 2 (failover at 10:12); at 10:05, item 1 was still a's.
	for _, tc := range []struct {
		at   time.Time
		f    history.Filter
		want string
	}{
		{t0.Add(15 * time.Minute), history.Filter{Job: "j"}, "[a/0/1/manual/10:10 b/1/2/failover/10:12]"},
		{t0.Add(5 * time.Minute), history.Filter{Job: "j"}, "[a/0/1/normal/10:00 a/1/1/normal/10:00]"},
		{t0.Add(15 * time.Minute), history.Filter{Job: "j", Server: "b"}, "[b/1/2/failover/10:12]"},
		{t0.Add(-time.Minute), history.Filter{}, "[]"},
	} {
		got, err := st.OwnersAt(t.Context(), tc.f, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if g := fmt.Sprint(describe(got)); g != tc.want {
			t.Errorf("OwnersAt(%+v, %s) = %s, want %s", tc.f, tc.at.Format("15:04"), g, tc.want)
		}
	}

	// The same answers from the in-memory Reader.
	mem := history.NewMemory(0)
	mem.Record(recs...)
	memAll, _ := mem.Runs(t.Context(), history.Filter{})
	if got := fmt.Sprint(describe(memAll)); got != want {
		t.Errorf("Memory.Runs = %s, want %s", got, want)
	}
	memOwners, _ := mem.OwnersAt(t.Context(), history.Filter{Job: "j"}, t0.Add(15*time.Minute))
	if got := fmt.Sprint(describe(memOwners)); got != "[a/0/1/manual/10:10 b/1/2/failover/10:12]" {
		t.Errorf("Memory.OwnersAt = %s", got)
	}
}

func TestStoreRetentionAndBadRecords(t *testing.T) {
	pool := newPool(t, integration.SharedPostgres(t))
	st := newStore(t, pghistory.Config{Pool: pool, Table: "public.runs", Retention: time.Hour})
	now := time.Now()
	old := history.Record{Job: "j", Server: "a", Source: history.SourceNormal, Begin: now.Add(-3 * time.Hour), End: now.Add(-2 * time.Hour)}
	fresh := old
	fresh.Begin, fresh.End = now.Add(-time.Minute), now
	bad := fresh
	bad.Source = "cron"
	// The first write prunes (retention 1 h): the old row goes, the bad
	// record is dropped without failing the batch.
	if err := st.Write(t.Context(), []history.Record{old, bad, fresh}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Runs(t.Context(), history.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].End.Equal(fresh.End.Truncate(time.Microsecond)) {
		t.Fatalf("after a write with retention 1 h: %+v; want only the fresh record", got)
	}
	n, err := st.Prune(t.Context(), now.Add(time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1 row deleted", n, err)
	}
	if _, err := pghistory.New(pghistory.Config{Pool: pool, Table: "a.b.c"}); err == nil {
		t.Fatal("New accepted table a.b.c")
	}
	if _, err := pghistory.New(pghistory.Config{}); !errors.Is(err, pghistory.ErrNoPool) {
		t.Fatalf("New without pool = %v", err)
	}
}
