package layout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardflow/shardflow/coord/store"
)

// Claim records: leader/failover/items/claim-{item}, one persistent node per
// failover claim, beside the queue entries in the failover directory (a
// shardflow addition). The claim itself stays the ephemeral
// execution/{item}/failover (its Czxid is the failover run's epoch, and it
// goes with the claimant's session); the record is its persistent shadow,
// written in the claim's transaction (which consumes the queue entry and
// bumps the directory's version) and deleted by the failover run's
// Complete, by a paused claimant giving the claim back and by a dropped
// claim (failover off, item beyond the total), each with the version bump.
//
// A record whose ephemeral claim is gone says that a claimant's session
// ended with its claim (mid failover run, or before it): nothing else tells
// the leader, since a failover run writes no run record. The leader's crash
// scan (failover.go, requeueLostClaims) puts such an item back in the queue
// at once, so any server claims it again, instead of waiting for the
// item's owner's next normal Begin, which a busy owner starts only after
// its current run. Until then the owner's Begin either skips the item (its
// claim is live) or, when the claim is gone, re-runs it and consumes the
// record in its transaction, as it consumes a queue entry: the record is a
// token of the cut failover run, and only one run consumes it.
//
// Servers of an older layout-2 release list the names without parsing them
// as items (parseItemName refuses "claim-"), so they ignore records, except
// that their leader's reshard deletes them as malformed entries: that
// claim then falls back to the old behaviour (its item runs again at its
// owner's next Begin once the claimant's session ended).

// claimPrefix starts a claim record's name in the failover directory.
const ClaimPrefix = "claim-"

// claimName is the record's name of a claim of item.
func ClaimName(item int) string { return ClaimPrefix + strconv.Itoa(item) }

// relClaim is the cache key of item's claim record.
func RelClaim(item int) string { return RelFailoverQ + "/" + ClaimName(item) }

// claim is the absolute path of item's claim record.
func (p JobPaths) Claim(item int) string { return store.Join(p.Root, RelFailoverQ, ClaimName(item)) }

// parseClaimName decodes a claim record's name.
func ParseClaimName(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, ClaimPrefix)
	if !ok {
		return 0, false
	}
	return ParseItemName(rest)
}

// foListing is the failover directory's listing, decoded: the queue
// entries (crashed runs' tokens waiting for a claim) and the claim records.
type FoListing struct {
	Queued map[int]bool
	Claims map[int]bool
}

// parseFailoverDir decodes the failover directory's children; other names
// are ignored.
func ParseFailoverDir(names []string) FoListing {
	var l FoListing // maps made on their first entry: most listings are empty
	for _, n := range names {
		if it, ok := ParseItemName(n); ok {
			if l.Queued == nil {
				l.Queued = make(map[int]bool, len(names))
			}
			l.Queued[it] = true
		} else if it, ok := ParseClaimName(n); ok {
			if l.Claims == nil {
				l.Claims = make(map[int]bool)
			}
			l.Claims[it] = true
		}
	}
	return l
}

// queuedCount is the number of queue entries (claimable items) among the
// failover directory's children.
func QueuedCount(names []string) int {
	n := 0
	for _, name := range names {
		if _, ok := ParseItemName(name); ok {
			n++
		}
	}
	return n
}

// claimRecord is the data of a claim record: who claimed, on which session
// (hex, as logged), for operators and status.
type ClaimRecord struct {
	Server  string `json:"server"`
	Session string `json:"session,omitempty"`
}

func EncodeClaimRecord(server string, session int64) []byte {
	b, _ := json.Marshal(ClaimRecord{Server: server, Session: "0x" + strconv.FormatInt(session, 16)})
	return b
}

// decodeClaimRecord decodes a record's data; a record it cannot decode
// names no server.
func DecodeClaimRecord(data []byte) ClaimRecord {
	var r ClaimRecord
	_ = json.Unmarshal(data, &r)
	return r
}

// PruneItem deletes an item beyond a lowered total: its execution node
// (the subtree) and its failover claim record, which goes with the claim
// the delete took, or the leader would queue the item again as a claim
// lost once the total is raised again. Both deletes are tried; a node
// already gone is fine.
func PruneItem(ctx context.Context, st store.Store, p JobPaths, item int) error {
	var errs []error
	if err := store.DeleteAll(ctx, st, p.Item(item)); err != nil && !errors.Is(err, store.ErrNoNode) {
		errs = append(errs, fmt.Errorf("delete %s: %w", p.Item(item), err))
	}
	if err := st.Delete(ctx, p.Claim(item), store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
		errs = append(errs, fmt.Errorf("delete %s: %w", p.Claim(item), err))
	}
	return errors.Join(errs...)
}
