package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// ledgerRoot is where testworker keeps its fenced ledger (see
// integration/testworker/ledger.go): {ledgerRoot}/{namespace}/{job}/{item}
// holds the highest committed epoch, and each accepted commit is a child
// c-{server}-{epoch}-{sequence}, in the order ZooKeeper applied them.
const ledgerRoot = "/ledger"

// ledgerCommit is one accepted commit read back from the ledger.
type ledgerCommit struct {
	Item   int
	Seq    int64
	Server string
	Epoch  int64
}

func (lc ledgerCommit) String() string {
	return fmt.Sprintf("#%d %s epoch=%d", lc.Seq, lc.Server, lc.Epoch)
}

// parseLedgerName decodes c-{server}-{epoch}-{sequence}.
func parseLedgerName(item int, name string) (ledgerCommit, error) {
	bad := fmt.Errorf("faults: ledger entry %q of item %d: want c-{server}-{epoch}-{sequence}", name, item)
	rest, ok := strings.CutPrefix(name, "c-")
	if !ok {
		return ledgerCommit{}, bad
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return ledgerCommit{}, bad
	}
	seq, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return ledgerCommit{}, bad
	}
	rest = rest[:i]
	i = strings.LastIndexByte(rest, '-')
	if i < 0 {
		return ledgerCommit{}, bad
	}
	epoch, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return ledgerCommit{}, bad
	}
	return ledgerCommit{Item: item, Seq: seq, Server: rest[:i], Epoch: epoch}, nil
}

// readLedger returns every item's accepted commits in the order ZooKeeper
// applied them, retrying transient store errors until timeout.
func (c *cluster) readLedger(timeout time.Duration) map[int][]ledgerCommit {
	c.t.Helper()
	st, _ := c.session()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := map[int][]ledgerCommit{}
	for item := range c.total {
		p := store.Join(ledgerRoot, c.namespace, c.job, strconv.Itoa(item))
		var names []string
		for {
			var err error
			names, _, err = st.Children(ctx, p)
			if errors.Is(err, store.ErrNoNode) {
				names, err = nil, nil
			}
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				c.t.Fatalf("faults: read the ledger %s: %v", p, err)
			case <-time.After(200 * time.Millisecond): // ZooKeeper restarting
			}
		}
		commits := make([]ledgerCommit, 0, len(names))
		for _, n := range names {
			lc, err := parseLedgerName(item, n)
			if err != nil {
				c.t.Fatal(err)
			}
			commits = append(commits, lc)
		}
		slices.SortFunc(commits, func(a, b ledgerCommit) int { return int(a.Seq - b.Seq) })
		out[item] = commits
	}
	return out
}

// ledgerViolations checks the ledger itself: for each item, in the order
// the commits were applied, no accepted commit has an epoch lower than an
// earlier accepted commit (a stale owner's write after a newer owner's),
// and no epoch was committed by two servers (two owners of one item under
// one epoch: the coordination handed out an epoch twice).
func ledgerViolations(ledger map[int][]ledgerCommit) []string {
	var out []string
	for item := range len(ledger) {
		var high ledgerCommit
		owner := map[int64]string{}
		for _, lc := range ledger[item] {
			if lc.Epoch < high.Epoch {
				out = append(out, fmt.Sprintf("item %d: stale commit %v accepted after %v", item, lc, high))
			}
			if lc.Epoch > high.Epoch {
				high = lc
			}
			if prev, ok := owner[lc.Epoch]; ok && prev != lc.Server {
				out = append(out, fmt.Sprintf("item %d: epoch %d committed by both %s and %s", item, lc.Epoch, prev, lc.Server))
			}
			owner[lc.Epoch] = lc.Server
		}
	}
	return out
}

// unrecordedCommits returns the "commit" events that have no accepted
// ledger entry: for each (server, item, epoch) the worker may not print
// more commits than the ledger accepted.
func unrecordedCommits(evs []Event, ledger map[int][]ledgerCommit) []string {
	type key struct {
		server string
		item   int
		epoch  int64
	}
	recorded := map[key]int{}
	for item, lcs := range ledger {
		for _, lc := range lcs {
			recorded[key{lc.Server, item, lc.Epoch}]++
		}
	}
	printed := map[key]int{}
	for _, e := range evs {
		if e.Ev == "commit" && e.Item != nil {
			printed[key{e.Server, *e.Item, e.Epoch}]++
		}
	}
	var out []string
	for k, n := range printed {
		if n > recorded[k] {
			out = append(out, fmt.Sprintf("%s printed %d commits of item %d epoch %d, the ledger holds %d", k.server, n, k.item, k.epoch, recorded[k]))
		}
	}
	slices.Sort(out)
	return out
}

// commitsAfterTakeover returns, for server's commits under one of its old
// epochs (epochs[item]), those the ledger accepted after another server's
// first accepted commit of the same item with a larger epoch, and how many
// of server's old-epoch commits came before that takeover.
func commitsAfterTakeover(ledger map[int][]ledgerCommit, server string, epochs map[int]int64) (after []string, before int) {
	for item, old := range epochs {
		taken := false
		for _, lc := range ledger[item] {
			switch {
			case lc.Server != server && lc.Epoch > old:
				taken = true
			case lc.Server == server && lc.Epoch == old && taken:
				after = append(after, fmt.Sprintf("item %d: %v after the takeover", item, lc))
			case lc.Server == server && lc.Epoch == old:
				before++
			}
		}
	}
	return after, before
}
