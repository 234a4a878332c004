package recipe

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/shardflow/shardflow/coord/store"
)

// ErrNoLeader: no candidate leads right now (Election.Leader).
var ErrNoLeader = errors.New("election: no leader")

// candidatePrefix names the candidates under the latch (the store appends
// the sequence).
const candidatePrefix = "n_"

// Election is leader election among the servers of one election directory,
// the LeaderLatch recipe of ElasticJob-Lite's Curator, over the store:
// every server stands as an ephemeral sequential candidate under
// {dir}/latch (its id as data); the lowest sequence leads once it has
// created {dir}/host (ephemeral, its id). A server whose session ends loses
// both nodes, and the next candidate takes over.
//
// Session states: the candidate and the host node are ephemeral, so they
// outlive a cut connection whose session resumes (Proceed adopts the
// candidate the session already has) and go with a session that ends
// (Forget then drops the path without a delete).
//
// Threading: an Election is used from one goroutine at a time (Proceed,
// Campaign, Resign, CampaignOps, Adopt, Forget); Leader and Observe only
// read the store and are safe from any goroutine.
type Election struct {
	st   store.Store
	dir  string // the election's directory, absolute
	host string // {dir}/host
	id   string // this server's id
	// candidate is this server's candidate node (absolute), "" when none.
	candidate string
	// hostHeld: a transaction of the caller's (CampaignOps, Adopt) created
	// candidate and the host node too: the next Proceed is elected without
	// a request.
	hostHeld bool
}

// NewElection returns the election under dir (absolute; its latch child
// must exist before a candidate stands) for the server id.
func NewElection(st store.Store, dir, id string) *Election {
	return &Election{st: st, dir: dir, host: store.Join(dir, "host"), id: id}
}

// LatchPath is the directory the candidates stand in ({dir}/latch).
func (e *Election) LatchPath() string { return store.Join(e.dir, "latch") }

// HostPath is the leader's node ({dir}/host).
func (e *Election) HostPath() string { return e.host }

// Candidate returns this server's candidate node, "" when none stands.
func (e *Election) Candidate() string { return e.candidate }

// HostHeld reports whether the transaction adopted last (Adopt) created the
// host node: this server leads, and the next Proceed says so at no cost.
func (e *Election) HostHeld() bool { return e.hostHeld }

// ExistsWatch is ExistsW with the delivery of the watch's event left to
// the caller: a channel its caller waits on (ChanExists), or an owner's
// event queue.
type ExistsWatch func(ctx context.Context, path string) (bool, store.Stat, error)

// ChanExists is an ExistsWatch that keeps the watch's channel in *ch.
func ChanExists(st store.Store, ch *<-chan store.Event) ExistsWatch {
	return func(ctx context.Context, path string) (bool, store.Stat, error) {
		ok, stat, c, err := st.ExistsW(ctx, path)
		*ch = c
		return ok, stat, err
	}
}

// NoWatch is an ExistsWatch that arms no watch (its caller does not wait).
func NoWatch(st store.Store) ExistsWatch { return st.Exists }

// CampaignOps returns the operations that make this server stand, for a
// transaction of the caller's: its candidate and, with takeHost, the host
// node (for a candidate that will be the first: a new election, or one
// whose latch was found empty; a host node still present makes the
// transaction fail). The candidate is the first operation. After the
// transaction commits, Adopt records the result; a failed one changes
// nothing.
func (e *Election) CampaignOps(takeHost bool) []store.Op {
	ops := []store.Op{&store.CreateOp{Path: store.Join(e.LatchPath(), candidatePrefix), Data: []byte(e.id), Mode: store.EphemeralSequential}}
	if takeHost {
		ops = append(ops, &store.CreateOp{Path: e.host, Data: []byte(e.id), Mode: store.Ephemeral})
	}
	return ops
}

// Adopt records a candidate this server stands as: the path a committed
// CampaignOps transaction created (its first operation's result), with
// hostHeld when it created the host node too; or a candidate of this
// session found standing (Standing), hostHeld false.
func (e *Election) Adopt(candidate string, hostHeld bool) {
	e.candidate, e.hostHeld = candidate, hostHeld
}

// Proceed is one step of campaigning, for a caller that must not block
// (an owner's event loop): it makes sure this server stands (adopting a
// candidate its session already has), and either takes the leadership
// (elected true) or arms a watch with watch and returns waiting: the watch
// fires when it should proceed again (on its predecessor candidate, or on
// a previous leader's host node still present). Only the last watch armed
// matters (earlier ones were on nodes found missing). It blocks only on
// its store calls, which ctx bounds.
func (e *Election) Proceed(ctx context.Context, watch ExistsWatch) (elected, waiting bool, err error) {
	if e.hostHeld && e.candidate != "" {
		e.hostHeld = false
		return true, false, nil
	}
	e.hostHeld = false
	latch := e.LatchPath()
	for range 16 {
		if e.candidate == "" {
			// Adopt a candidate this session already has (an election that
			// ran just before a re-registration): a second one would stand
			// behind the first, which never goes, and never lead.
			own, _, err := e.Standing(ctx)
			if err != nil {
				return false, false, err
			}
			e.candidate = own
		}
		if e.candidate == "" {
			p, err := e.st.Create(ctx, store.Join(latch, candidatePrefix), []byte(e.id), store.EphemeralSequential)
			if err != nil {
				return false, false, err
			}
			e.candidate = p
		}
		kids, _, err := e.st.Children(ctx, latch)
		if err != nil {
			return false, false, err
		}
		slices.SortFunc(kids, func(a, b string) int { return strings.Compare(seqOf(a), seqOf(b)) })
		idx := slices.Index(kids, store.Base(e.candidate))
		if idx < 0 {
			e.candidate = ""
			continue
		}
		if idx == 0 {
			return e.takeHost(ctx, watch)
		}
		ok, _, err := watch(ctx, store.Join(latch, kids[idx-1]))
		if err != nil {
			return false, false, err
		}
		if ok {
			return false, true, nil
		}
	}
	return false, false, errors.New("election: did not settle after 16 rounds")
}

// takeHost writes the host node for the first candidate. If a previous
// leader's host node still exists, it arms a watch on it (watch) and
// returns waiting.
func (e *Election) takeHost(ctx context.Context, watch ExistsWatch) (elected, waiting bool, _ error) {
	for {
		_, err := e.st.Create(ctx, e.host, []byte(e.id), store.Ephemeral)
		if err == nil {
			return true, false, nil
		}
		if !errors.Is(err, store.ErrNodeExists) {
			return false, false, err
		}
		sess, _ := e.st.Session()
		ok, stat, err := watch(ctx, e.host)
		if err != nil {
			return false, false, err
		}
		if ok && stat.EphemeralOwner == sess.ID {
			return true, false, nil // ours already (an earlier step)
		}
		if ok {
			return false, true, nil
		}
		// Gone meanwhile: try again.
	}
}

// Campaign blocks until this server leads. It returns nil when elected,
// ctx.Err() when ctx ends first (the candidate stays: Resign withdraws it),
// or the error of a failed store call.
func (e *Election) Campaign(ctx context.Context) error {
	for {
		var wait <-chan store.Event
		elected, _, err := e.Proceed(ctx, ChanExists(e.st, &wait))
		if err != nil || elected {
			return err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ResignOps returns the operations that withdraw this server, for a
// transaction of the caller's on session sess: the host node's delete when
// sess holds it (read now: one request), then the candidate's. nil when no
// candidate stands; an error only for a failed read. After the transaction
// commits, Forget records it.
func (e *Election) ResignOps(ctx context.Context, sess store.Session) ([]store.Op, error) {
	if e.candidate == "" {
		return nil, nil
	}
	ok, stat, err := e.st.Exists(ctx, e.host)
	if err != nil {
		return nil, err
	}
	var ops []store.Op
	if ok && stat.EphemeralOwner == sess.ID {
		ops = append(ops, &store.DeleteOp{Path: e.host, Version: stat.Version})
	}
	return append(ops, &store.DeleteOp{Path: e.candidate, Version: store.AnyVersion}), nil
}

// Resign gives up leadership and candidacy: it deletes the host node if
// this session holds it, then this server's candidate. The next candidate
// takes over. A node already gone is no error. It blocks only on its store
// calls, which ctx bounds.
func (e *Election) Resign(ctx context.Context) error {
	var errs []error
	sess, _ := e.st.Session()
	if ok, stat, err := e.st.Exists(ctx, e.host); err != nil {
		errs = append(errs, err)
	} else if ok && stat.EphemeralOwner == sess.ID {
		if err := e.st.Delete(ctx, e.host, stat.Version); err != nil && !errors.Is(err, store.ErrNoNode) {
			errs = append(errs, err)
		}
	}
	if e.candidate != "" {
		if err := e.st.Delete(ctx, e.candidate, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			errs = append(errs, err)
		}
		e.candidate = ""
	}
	return errors.Join(errs...)
}

// Forget drops the candidate without deleting it: the session that held it
// is gone, and its nodes with it, or a transaction of the caller's deleted
// them (ResignOps).
func (e *Election) Forget() { e.candidate, e.hostHeld = "", false }

// Leader returns the leading server's id, or ErrNoLeader when none leads
// now. One read; ctx bounds it.
func (e *Election) Leader(ctx context.Context) (string, error) {
	id, _, err := e.leaderW(ctx)
	return id, err
}

func (e *Election) leaderW(ctx context.Context) (string, <-chan store.Event, error) {
	for {
		data, _, ch, err := e.st.GetW(ctx, e.host)
		if err == nil {
			return string(data), ch, nil
		}
		if !errors.Is(err, store.ErrNoNode) {
			return "", nil, err
		}
		ok, _, ch, err := e.st.ExistsW(ctx, e.host)
		if err != nil {
			return "", nil, err
		}
		if !ok {
			return "", ch, ErrNoLeader
		}
		// Created between the two reads: read it again.
	}
}

// Observe returns a channel that receives the leading server's id each
// time leadership changes ("" while no server leads), starting with the
// current one. One goroutine, owned by Observe, follows the host node; it
// closes the channel and exits when ctx ends or a store call fails. A slow
// reader misses intermediate leaders, never the latest.
func (e *Election) Observe(ctx context.Context) <-chan string {
	out := make(chan string, 1)
	go func() {
		defer close(out)
		last := "\x00" // no value sent yet
		for {
			id, ch, err := e.leaderW(ctx)
			if err != nil && !errors.Is(err, ErrNoLeader) {
				return
			}
			if id != last {
				select {
				case <-out: // drop the unread older value
				default:
				}
				out <- id
				last = id
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Standing returns the path of a candidate under the latch that belongs to
// this server on the store's current session ("" if none), and whether no
// candidate at all stood when the latch was listed. It does not change the
// Election (Adopt does).
func (e *Election) Standing(ctx context.Context) (own string, none bool, _ error) {
	sess, _ := e.st.Session()
	latch := e.LatchPath()
	kids, _, err := e.st.Children(ctx, latch)
	if err != nil {
		return "", false, err
	}
	for _, k := range kids {
		data, st, err := e.st.Get(ctx, store.Join(latch, k))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return "", false, err
		}
		if string(data) == e.id && st.EphemeralOwner == sess.ID {
			return store.Join(latch, k), false, nil
		}
	}
	return "", len(kids) == 0, nil
}

// seqOf returns the sequence suffix of a candidate name (the last 10 bytes).
func seqOf(name string) string {
	if len(name) >= 10 {
		return name[len(name)-10:]
	}
	return name
}
