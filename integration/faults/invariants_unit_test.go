package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
)

// The invariant checkers are the suites' judges: these table tests show
// they catch what they claim to catch, without Docker.

func TestCheckDisjointOwnership(t *testing.T) {
	srv := func(id, status string, items ...int) coord.ServerStatus {
		return coord.ServerStatus{ID: id, Status: status, Sharding: items}
	}
	tests := []struct {
		name    string
		servers []coord.ServerStatus
		wantErr string
	}{
		{"exact cover", []coord.ServerStatus{srv("a", "READY", 0, 1, 6), srv("b", "RUNNING", 2, 3, 7), srv("c", "READY", 4, 5)}, ""},
		{"offline server ignored", []coord.ServerStatus{srv("a", "READY", 0, 1, 2, 3), srv("b", "READY", 4, 5, 6, 7), srv("x", "OFFLINE", 0, 1)}, ""},
		{"overlap", []coord.ServerStatus{srv("a", "READY", 0, 1, 2, 3), srv("b", "READY", 3, 4, 5, 6, 7)}, "item 3 owned by both a and b"},
		{"gap", []coord.ServerStatus{srv("a", "READY", 0, 1, 2), srv("b", "READY", 4, 5, 6, 7)}, "items [3] owned by no live server"},
		{"gap left by offline owner", []coord.ServerStatus{srv("a", "READY", 0, 1, 2, 3), srv("b", "OFFLINE", 4, 5, 6, 7)}, "items [4 5 6 7]"},
		{"out of range", []coord.ServerStatus{srv("a", "READY", 0, 1, 2, 3, 4, 5, 6, 7, 8)}, "outside 0..7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkDisjointOwnership(coord.JobStatus{Servers: tt.servers}, 8)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func ev(kind, server string, item int, epoch, t int64) Event {
	return Event{Ev: kind, Server: server, Item: &item, Epoch: epoch, T: t}
}

// commit is a commit event whose fencing check started at checked.
func commit(server string, item int, epoch, checked, t int64) Event {
	e := ev("commit", server, item, epoch, t)
	e.Checked = checked
	return e
}

func TestStaleCommits(t *testing.T) {
	tests := []struct {
		name string
		evs  []Event
		want int
	}{
		{"commits of the owner", []Event{ev("begin", "a", 1, 5, 100), commit("a", 1, 5, 105, 110), commit("a", 1, 5, 115, 120)}, 0},
		{"old owner committed before the new begin", []Event{ev("begin", "a", 1, 5, 100), commit("a", 1, 5, 105, 110), ev("begin", "b", 1, 7, 200)}, 0},
		{"old owner's check passed after the new begin", []Event{ev("begin", "a", 1, 5, 100), ev("begin", "b", 1, 7, 200), commit("a", 1, 5, 240, 250)}, 1},
		{"checked before the new begin, printed after (a pause)", []Event{ev("begin", "a", 1, 5, 100), ev("begin", "b", 1, 7, 200), commit("a", 1, 5, 190, 5000)}, 0},
		{"same millisecond is not ordered", []Event{ev("begin", "b", 1, 7, 200), commit("a", 1, 5, 200, 201)}, 0},
		{"newer begin of another item", []Event{ev("begin", "b", 2, 7, 200), commit("a", 1, 5, 240, 250)}, 0},
		{"own newer begin", []Event{ev("begin", "a", 1, 7, 200), commit("a", 1, 5, 240, 250)}, 0},
		{"commit with the newer epoch", []Event{ev("begin", "b", 1, 7, 200), commit("a", 1, 9, 240, 250)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := staleCommits(tt.evs); len(got) != tt.want {
				t.Fatalf("staleCommits = %q, want %d", got, tt.want)
			}
		})
	}
}

func lc(item int, seq int64, server string, epoch int64) ledgerCommit {
	return ledgerCommit{Item: item, Seq: seq, Server: server, Epoch: epoch}
}

func TestParseLedgerName(t *testing.T) {
	got, err := parseLedgerName(3, "c-w-1-123456-0000000042")
	if err != nil || got != lc(3, 42, "w-1", 123456) {
		t.Fatalf("parseLedgerName = %+v, %v; want server w-1 epoch 123456 seq 42", got, err)
	}
	for _, bad := range []string{"x-w1-1-0000000001", "c-w1-0000000001", "c-w1-x-0000000001", "c-w1-1-x"} {
		if _, err := parseLedgerName(0, bad); err == nil {
			t.Fatalf("parseLedgerName(%q) succeeded, want an error", bad)
		}
	}
}

func TestLedgerViolations(t *testing.T) {
	tests := []struct {
		name   string
		ledger map[int][]ledgerCommit
		want   []string
	}{
		{"epochs grow", map[int][]ledgerCommit{0: {lc(0, 1, "a", 5), lc(0, 2, "a", 5), lc(0, 3, "b", 7)}, 1: {lc(1, 1, "b", 5)}}, nil},
		{"stale commit after a newer one", map[int][]ledgerCommit{0: {lc(0, 1, "a", 5), lc(0, 2, "b", 7), lc(0, 3, "a", 5)}}, []string{"item 0: stale commit #3 a epoch=5 accepted after #2 b epoch=7"}},
		{"one epoch, two servers", map[int][]ledgerCommit{0: {lc(0, 1, "a", 5), lc(0, 2, "b", 5)}}, []string{"item 0: epoch 5 committed by both a and b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ledgerViolations(tt.ledger)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("ledgerViolations = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestUnrecordedCommits(t *testing.T) {
	ledger := map[int][]ledgerCommit{0: {lc(0, 1, "a", 5)}, 1: nil}
	if got := unrecordedCommits([]Event{commit("a", 0, 5, 1, 2)}, ledger); len(got) != 0 {
		t.Fatalf("a recorded commit reported: %q", got)
	}
	if got := unrecordedCommits([]Event{commit("a", 0, 5, 1, 2), commit("a", 0, 5, 3, 4), commit("b", 1, 6, 3, 4)}, ledger); len(got) != 2 {
		t.Fatalf("unrecordedCommits = %q, want 2 (a's second commit of item 0, b's commit of item 1)", got)
	}
}

func TestCommitsAfterTakeover(t *testing.T) {
	ledger := map[int][]ledgerCommit{
		0: {lc(0, 1, "p", 5), lc(0, 2, "p", 5), lc(0, 3, "a", 9), lc(0, 4, "p", 5)},
		1: {lc(1, 1, "p", 5), lc(1, 2, "b", 9)},
	}
	after, before := commitsAfterTakeover(ledger, "p", map[int]int64{0: 5, 1: 5})
	if len(after) != 1 || !strings.Contains(after[0], "#4 p epoch=5") || before != 3 {
		t.Fatalf("after %q before %d; want [#4 p epoch=5] and 3", after, before)
	}
}

func TestItemsBegunSince(t *testing.T) {
	evs := []Event{ev("begin", "a", 0, 1, 100), ev("begin", "b", 1, 1, 300), ev("commit", "a", 2, 1, 400), ev("begin", "a", 2, 1, 301)}
	begun, missing := itemsBegunSince(evs, time.UnixMilli(100), 3)
	if len(begun) != 2 || begun[0] != 1 || begun[1] != 2 || len(missing) != 1 || missing[0] != 0 {
		t.Fatalf("begun %v missing %v, want [1 2] and [0] (a begin at exactly since does not count)", begun, missing)
	}
	if _, missing := itemsBegunSince(evs, time.UnixMilli(0), 3, "b"); len(missing) != 2 {
		t.Fatalf("only server b: missing %v, want [0 2]", missing)
	}
}

// A victim restarted under the same id: the items its killed predecessor
// left open (begun, never ended) are not the new process's.
func TestOpenItemsOfTheCurrentProcess(t *testing.T) {
	fo := ev("begin", "w1", 4, 9, 110)
	fo.Failover = true
	evs := []Event{ev("begin", "w1", 0, 1, 100), fo, {Ev: "ready", Server: "w1", T: 200},
		ev("begin", "w1", 1, 2, 300), ev("begin", "w2", 2, 2, 300)}
	open := openItems(evs, "w1", time.UnixMilli(400))
	if len(open) != 1 || open[1] != 2 {
		t.Fatalf("open %v, want only item 1 (epoch 2) of the process started at 200", open)
	}
	if got := openFailoverRuns(evs, "w1", time.UnixMilli(400)); len(got) != 0 {
		t.Fatalf("open failover runs %v, want none (item 4 was the predecessor's)", got)
	}
	if got := openFailoverRuns(evs, "w1", time.UnixMilli(150)); len(got) != 1 || got[0] != 4 {
		t.Fatalf("open failover runs before the restart %v, want [4]", got)
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if got := percentile(ds, 50); got != 3 {
		t.Fatalf("p50 = %v, want 3", got)
	}
	if got := percentile(ds, 100); got != 5 {
		t.Fatalf("p100 = %v, want 5", got)
	}
	if ds[0] != 5 {
		t.Fatal("percentile sorted its input in place")
	}
}

func TestParseEvent(t *testing.T) {
	e, err := parseEvent([]byte(`{"ev":"commit","server":"w1","item":0,"epoch":12,"seq":3,"t":1700000000000}`))
	if err != nil || e.ItemNo() != 0 || e.Epoch != 12 || e.Seq != 3 || e.Server != "w1" {
		t.Fatalf("parseEvent = %+v, %v", e, err)
	}
	if e, _ := parseEvent([]byte(`{"ev":"ready","t":1}`)); e.ItemNo() != -1 {
		t.Fatalf("ready has item %d, want -1", e.ItemNo())
	}
	for _, bad := range []string{`panic: boom`, `{"t":1}`} {
		if _, err := parseEvent([]byte(bad)); err == nil {
			t.Fatalf("parseEvent(%q) succeeded, want an error", bad)
		}
	}
}
