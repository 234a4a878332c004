package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/shardflow/shardflow/coord/store"
)

// ledgerRoot is the root of every worker's ledger. The fault suites read
// the ledger back from ledgerRoot/{namespace}/{job}/{item}; keep the two in
// step (integration/faults/ledger_test.go).
const ledgerRoot = "/ledger"

// errFenced is returned by ledger.commit when the item's ledger has already
// accepted a commit with a larger epoch: the writer is a stale owner.
var errFenced = errors.New("testworker: ledger: a commit with a newer epoch was accepted for this item; the stale owner's write is refused")

// ledgerEntry is the data of one accepted commit. The entry's name,
// c-{server}-{epoch}-{sequence}, carries the same facts so that the suites
// audit an item's whole ledger with one Children call.
type ledgerEntry struct {
	Server string `json:"server"`
	Epoch  int64  `json:"epoch"`
}

// ledger is the worker's fenced sink: the place its "commits" go, with the
// fencing epoch enforced atomically at write time, as a real sink does (the
// Postgres source keeps a fence row in the same transaction as the writes).
//
// Each item has a node ledgerRoot/{namespace}/{job}/{item} holding the
// highest epoch committed so far (decimal). A commit reads it (data and
// version), refuses when its own epoch is lower, and otherwise applies one
// Multi: set the item node to its epoch at the version read, and create a
// persistent sequential child c-{server}-{epoch}- recording {server, epoch}. A version
// conflict means another commit landed in between: re-read and re-check.
// So the children, in sequence order, are the accepted commits in the order
// ZooKeeper applied them, and no accepted commit has an epoch lower than an
// earlier accepted one.
//
// The ledger runs on its own ZooKeeper session (a sink is another system
// than the coordination service), so a worker's coordination session
// expiring does not by itself stop its ledger writes: the epoch check does.
//
// Safe for concurrent use: all state is in ZooKeeper.
type ledger struct {
	st     store.Store
	root   string // ledgerRoot/{namespace}/{job}
	server string
}

func newLedger(st store.Store, namespace, job, server string) *ledger {
	return &ledger{st: st, root: store.Join(ledgerRoot, namespace, job), server: server}
}

func (l *ledger) itemPath(item int) string { return store.Join(l.root, strconv.Itoa(item)) }

// commit records one commit of item under epoch. It returns nil when the
// write was accepted, an error wrapping errFenced when a larger epoch was
// already accepted for item, and any other error when the outcome is
// unknown or the write failed (ctx ended, connection lost: the write may
// or may not have been applied; the ledger itself is the record).
func (l *ledger) commit(ctx context.Context, item int, epoch int64) error {
	p := l.itemPath(item)
	entry, err := json.Marshal(ledgerEntry{Server: l.server, Epoch: epoch})
	if err != nil {
		return fmt.Errorf("testworker: ledger entry: %w", err)
	}
	for {
		data, st, err := l.st.Get(ctx, p)
		if errors.Is(err, store.ErrNoNode) {
			if err := store.CreateAll(ctx, l.st, p); err != nil {
				return fmt.Errorf("testworker: ledger: create %s: %w", p, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("testworker: ledger: read %s: %w", p, err)
		}
		high, err := parseLedgerEpoch(data)
		if err != nil {
			return fmt.Errorf("testworker: ledger: %s: %w", p, err)
		}
		if epoch < high {
			return fmt.Errorf("testworker: ledger: item %d epoch %d, but epoch %d already committed: %w", item, epoch, high, errFenced)
		}
		_, err = l.st.Multi(ctx,
			&store.SetOp{Path: p, Data: []byte(strconv.FormatInt(epoch, 10)), Version: st.Version},
			&store.CreateOp{Path: fmt.Sprintf("%s/c-%s-%d-", p, l.server, epoch), Data: entry, Mode: store.PersistentSequential},
		)
		if errors.Is(err, store.ErrBadVersion) {
			continue // another commit landed since the read: re-check
		}
		if err != nil {
			return fmt.Errorf("testworker: ledger: commit item %d epoch %d: %w", item, epoch, err)
		}
		return nil
	}
}

// parseLedgerEpoch decodes an item node's data; empty (just created) is 0.
func parseLedgerEpoch(data []byte) (int64, error) {
	if len(data) == 0 {
		return 0, nil
	}
	e, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("highest epoch %q is not a decimal integer: %w", data, err)
	}
	return e, nil
}
