package registration

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
)

// Offline deletes this server's ephemerals (status, candidate, host when
// leading) and raises the resharding flag so the others take over its items.
// It tries one transaction first (OfflineAtOnce), then node by node.
func (g *Registration) Offline(ctx context.Context) error {
	if g.OfflineAtOnce(ctx) {
		return nil
	}
	var errs []error
	if err := g.elec.Resign(ctx); err != nil {
		errs = append(errs, err)
	}
	g.NotLeader()
	status := g.p.Server(g.id, layout.NStatus)
	err := layout.MultiRetry(ctx, g.st, func(ctx context.Context, _ int) ([]store.Op, error) {
		if ok, _, err := g.st.Exists(ctx, status); err != nil || !ok {
			return nil, err
		}
		return []store.Op{&store.DeleteOp{Path: status, Version: store.AnyVersion}, layout.TouchMembership(g.p)}, nil
	})
	if err != nil && !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrClosed) {
		errs = append(errs, err)
	}
	if err := layout.RaiseFlag(ctx, g.st, g.p); err != nil && !errors.Is(err, store.ErrNoNode) && !errors.Is(err, store.ErrClosed) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("coord: leave job %q: %w", g.jname, err)
	}
	return nil
}

// OfflineAtOnce is Offline in one transaction (the host node when this
// session holds it, the candidate, the status node, the membership version
// bumped) with the resharding flag's create sent beside it: a Stop of
// thousands of jobs waits a round trip or two per job instead of six. A
// reshard that read the servers before the transaction fails on the
// membership version, so the flag may go up first. It reports false, having
// changed nothing or only raised the flag, when any of those nodes is not
// as expected; Offline then goes node by node.
func (g *Registration) OfflineAtOnce(ctx context.Context) bool {
	sess, _ := g.st.Session()
	ops := g.OfflineOps(ctx, sess)
	if ops == nil {
		return false
	}
	flagDone := make(chan error, 1)
	go func() { flagDone <- layout.RaiseFlag(ctx, g.st, g.p) }()
	_, err := g.st.Multi(ctx, ops...)
	ferr := <-flagDone
	if err != nil {
		return false
	}
	g.WentOffline()
	return ferr == nil || errors.Is(ferr, store.ErrNoNode) || errors.Is(ferr, store.ErrClosed)
}

// OfflineOps plans this server's going offline in one transaction: its
// resignation from the election (recipe.Election.ResignOps: the host node
// if this session holds it, and the candidate) and its status node's delete, with the membership
// bump. nil when it cannot go at once (no candidate, or the session not
// connected, or the host node's read failed): the caller leaves by
// Offline instead. OfflineAtOnce and coord/protocol's shared leave both
// go offline through it.
func (g *Registration) OfflineOps(ctx context.Context, sess store.Session) []store.Op {
	if g.elec.Candidate() == "" || sess.State != store.StateConnected {
		return nil
	}
	ops, err := g.elec.ResignOps(ctx, sess)
	if err != nil {
		return nil
	}
	return append(ops,
		&store.DeleteOp{Path: g.p.Server(g.id, layout.NStatus), Version: store.AnyVersion},
		layout.TouchMembership(g.p))
}

// WentOffline records that this server's election nodes are gone
// (OfflineAtOnce's bookkeeping, and the shared leave's).
func (g *Registration) WentOffline() {
	g.elec.Forget()
	g.NotLeader()
}
