package protocol

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
)

// errNoLeader: no server leads the job right now (election.Leader).
var errNoLeader = errors.New("coord: election: no leader")

// election is leader election among a job's servers, the LeaderLatch
// recipe of ElasticJob-Lite's Curator, over the store: every server stands
// as an ephemeral sequential candidate under leader/election/latch (its
// server id as data); the lowest sequence leads once it has created
// leader/election/host (ephemeral, its server id). A server whose session
// ends loses both nodes, and the next candidate takes over.
//
// An election is used from one goroutine at a time (the job's watcher; Join
// and Leave when the watcher is not running); Leader and Observe only read
// the store and are safe from any goroutine.
type election struct {
	st    store.Store
	latch string // leader/election/latch, absolute
	host  string // leader/election/host, absolute
	id    string // this server's id
	// candidate is this server's candidate node (absolute), "" when none.
	candidate string
	// hostHeld: the join's transaction created candidate and the host node
	// too (the first and only candidate then: a new job, or a stored one
	// whose latch was empty): the next proceed is elected without a
	// request.
	hostHeld bool
}

// proceed is one step of campaigning, for a caller that must not block
// (the job's watcher): it makes sure this server stands (adopting a
// candidate its session already has), and either takes the leadership
// (elected true) or arms a watch with watch and returns waiting: the watch
// fires when it should proceed again (on its predecessor candidate, or on
// a previous leader's host node still present). Only the last watch armed
// matters (earlier ones were on nodes found missing). It blocks only on
// its store calls, which ctx bounds.
func (e *election) proceed(ctx context.Context, watch existsWatch) (elected, waiting bool, err error) {
	if e.hostHeld && e.candidate != "" {
		e.hostHeld = false
		return true, false, nil
	}
	e.hostHeld = false
	for range 16 {
		if e.candidate == "" {
			// Adopt a candidate this session already has (an election that
			// ran just before a re-registration): a second one would stand
			// behind the first, which never goes, and never lead.
			own, err := e.ownCandidate(ctx)
			if err != nil {
				return false, false, err
			}
			e.candidate = own
		}
		if e.candidate == "" {
			p, err := e.st.Create(ctx, store.Join(e.latch, layout.CandidatePrefix), []byte(e.id), store.EphemeralSequential)
			if err != nil {
				return false, false, err
			}
			e.candidate = p
		}
		kids, _, err := e.st.Children(ctx, e.latch)
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
		ok, _, err := watch(ctx, store.Join(e.latch, kids[idx-1]))
		if err != nil {
			return false, false, err
		}
		if ok {
			return false, true, nil
		}
	}
	return false, false, errors.New("coord: leader election did not settle after 16 rounds")
}

// takeHost writes leader/election/host for the first candidate. If a
// previous leader's host node still exists, it arms a watch on it (watch)
// and returns waiting.
func (e *election) takeHost(ctx context.Context, watch existsWatch) (elected, waiting bool, _ error) {
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

// Campaign blocks until this server leads the job. It returns nil when
// elected, ctx.Err() when ctx ends first (the candidate stays: Resign
// withdraws it), or the error of a failed store call.
func (e *election) Campaign(ctx context.Context) error {
	for {
		var wait <-chan store.Event
		elected, _, err := e.proceed(ctx, chanExists(e.st, &wait))
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

// Resign gives up leadership and candidacy: it deletes the host node if
// this session holds it, then this server's candidate. The next candidate
// takes over. A node already gone is no error. It blocks only on its store
// calls, which ctx bounds.
func (e *election) Resign(ctx context.Context) error {
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

// forget drops the candidate without deleting it: the session that held it
// is gone, and its nodes with it.
func (e *election) forget() { e.candidate, e.hostHeld = "", false }

// Leader returns the leading server's id, or errNoLeader when none leads
// now. One read; ctx bounds it.
func (e *election) Leader(ctx context.Context) (string, error) {
	id, _, err := e.leaderW(ctx)
	return id, err
}

func (e *election) leaderW(ctx context.Context) (string, <-chan store.Event, error) {
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
			return "", ch, errNoLeader
		}
		// Created between the two reads: read it again.
	}
}

// Observe returns a channel that receives the leading server's id each
// time leadership changes ("" while no server leads), starting with the
// current one. One goroutine, owned by Observe, follows the host node; it
// closes the channel and exits when ctx ends or a store call fails. A slow
// reader misses intermediate leaders, never the latest.
func (e *election) Observe(ctx context.Context) <-chan string {
	out := make(chan string, 1)
	go func() {
		defer close(out)
		last := "\x00" // no value sent yet
		for {
			id, ch, err := e.leaderW(ctx)
			if err != nil && !errors.Is(err, errNoLeader) {
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

// ownCandidate returns the path of a candidate under the latch that
// belongs to this server on the current session, or "".
func (e *election) ownCandidate(ctx context.Context) (string, error) {
	own, _, err := e.standing(ctx)
	return own, err
}

// standing returns ownCandidate's result and whether no candidate at all
// stood when the latch was listed.
func (e *election) standing(ctx context.Context) (own string, none bool, _ error) {
	sess, _ := e.st.Session()
	kids, _, err := e.st.Children(ctx, e.latch)
	if err != nil {
		return "", false, err
	}
	for _, k := range kids {
		data, st, err := e.st.Get(ctx, store.Join(e.latch, k))
		if errors.Is(err, store.ErrNoNode) {
			continue
		}
		if err != nil {
			return "", false, err
		}
		if string(data) == e.id && st.EphemeralOwner == sess.ID {
			return store.Join(e.latch, k), false, nil
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
