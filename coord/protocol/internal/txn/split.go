package txn

import (
	"context"
	"maps"

	"github.com/shardflow/shardflow/coord/store"
)

// Splitting transactions that grow with the items.
//
// A transaction covering every item of a server (marking them running,
// completed, queued) grows with the items, and ZooKeeper refuses a request
// beyond its jute.maxbuffer (1 MB): about 1,000 items in one Begin by
// store.OpSize's upper-bound estimate (3 operations per item). Such
// transactions are built as a head (guards, e.g. the version check of the
// server's sharding node), one group of intents per item, and a tail (the
// write that states the outcome, e.g. the server's status). When the whole
// fits the store's limit (store.RequestLimit) it is ONE Multi, as before;
// otherwise it is cut between groups into consecutive Multis, each below
// the limit and each beginning with the head, and the tail goes in the
// last one. So:
//   - every part is fenced by the same guards: a reshard between two parts
//     fails the later part (and every part after it);
//   - each item's group is applied whole or not at all;
//   - the tail is the commit point: it is written only if every part was.
// What is lost is all-or-nothing across items: when part k fails, the
// groups of parts before it stay applied, and the caller undoes them
// (Begin) or keeps them because they are true (Complete: those items did
// complete). See coord/protocol's markRunning and complete.

// SplitBudget is the share of the store's request limit a part may use:
// the size estimate (store.OpSize) is an upper bound, the margin is for
// the paths' absolute form.
func (c *Committer) SplitBudget() int { return store.RequestLimit(c.st) * 7 / 8 }

// intentSize estimates the bytes an Intent adds to a Multi (an upper bound:
// a conditional Intent may resolve to nothing).
func (c *Committer) intentSize(in Intent) int {
	p := c.p.Abs(in.Rel)
	switch in.Kind {
	case Delete, DeleteIfPresent, DeleteIfPresentRead:
		return store.OpSize(&store.DeleteOp{Path: p})
	case Check:
		return store.OpSize(&store.CheckOp{Path: p})
	}
	return store.OpSize(&store.CreateOp{Path: p, Data: in.Data})
}

func (c *Committer) intentsSize(ins []Intent) int {
	n := 0
	for _, in := range ins {
		n += c.intentSize(in)
	}
	return n
}

// splitParts cuts head + groups + tail into parts below splitBudget (see
// the comment at the top of this file). ends[k] is the number of groups in
// parts 0..k. A single group too large for a part still gets a part of its
// own (the store then refuses it).
func (c *Committer) splitParts(head []Intent, groups [][]Intent, tail []Intent) (parts [][]Intent, ends []int) {
	budget := c.SplitBudget()
	fixed := 32 + c.intentsSize(head) + c.intentsSize(tail)
	var cur []Intent
	size := fixed
	open := false
	for i, g := range groups {
		gs := c.intentsSize(g)
		if open && size+gs > budget {
			parts = append(parts, cur)
			ends = append(ends, i)
			cur, size, open = nil, fixed, false
		}
		if !open {
			cur = append(cur, head...)
			open = true
		}
		cur = append(cur, g...)
		size += gs
	}
	if !open {
		cur = append(cur, head...)
	}
	cur = append(cur, tail...)
	parts = append(parts, cur)
	ends = append(ends, len(groups))
	return parts, ends
}

// CommitSplit commits head + groups + tail as ONE Multi when it fits the
// store's request limit, else in parts (see the top of this file). It
// returns how many groups are applied: len(groups) on success; on error,
// those of the parts committed before the failing one.
func (c *Committer) CommitSplit(ctx context.Context, head []Intent, groups [][]Intent, tail []Intent) (applied int, err error) {
	applied, _, err = c.CommitSplitWritten(ctx, head, groups, tail)
	return applied, err
}

// CommitSplitWritten is CommitSplit returning, on success, the versions
// its parts left on the nodes they created or set (Written).
func (c *Committer) CommitSplitWritten(ctx context.Context, head []Intent, groups [][]Intent, tail []Intent) (applied int, w Written, err error) {
	parts, ends := c.splitParts(head, groups, tail)
	for k, part := range parts {
		pw, err := c.commit(ctx, part, true)
		if err != nil {
			return applied, nil, err
		}
		if w == nil {
			w = pw
		} else {
			maps.Copy(w, pw)
		}
		applied = ends[k]
	}
	return applied, w, nil
}

// Each makes every Intent a group of its own, for transactions whose
// intents are independent of each other.
func Each(ins []Intent) [][]Intent {
	groups := make([][]Intent, len(ins))
	for i := range ins {
		groups[i] = ins[i : i+1]
	}
	return groups
}
