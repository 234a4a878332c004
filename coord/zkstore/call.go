package zkstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/shardflow/shardflow/coord/store"
)

// call runs fn against the current client, bounded by ctx. go-zookeeper
// calls take no context, so with a cancellable ctx fn runs on its own
// goroutine and call returns ctx.Err() when ctx ends first; that goroutine
// ends when the ZooKeeper call returns (on reply, on disconnect, or when
// Close closes the client) and Close waits for it. If the caller has gone,
// abandon (when non-nil) runs on that goroutine after fn succeeded, to undo
// side effects nobody will see (an armed watch).
//
// It returns the client used, so errors can be mapped in its light, and
// fn's raw error (or ctx's, or store.ErrClosed).
func (s *Store) call(ctx context.Context, fn func(c *client) error, abandon func()) (*client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, store.ErrClosed
	}
	c := s.cur
	s.calls.Add(1)
	s.mu.Unlock()

	select {
	case <-c.ready:
	default:
		select {
		case <-c.ready:
		case <-ctx.Done():
			s.calls.Done()
			return c, ctx.Err()
		case <-c.d.ctx.Done():
			s.calls.Done()
			return c, zk.ErrConnectionClosed // retired: mapped to expired or closed
		}
	}

	if ctx.Done() == nil {
		defer s.calls.Done()
		return c, fn(c)
	}

	const (
		running int32 = iota
		finished
		abandoned
	)
	var state atomic.Int32
	done := make(chan error, 1)
	go func() {
		defer s.calls.Done()
		err := fn(c)
		if state.CompareAndSwap(running, finished) {
			done <- err
			return
		}
		if err == nil && abandon != nil {
			abandon()
		}
	}()
	select {
	case err := <-done:
		return c, err
	case <-ctx.Done():
		if state.CompareAndSwap(running, abandoned) {
			return c, ctx.Err()
		}
		return c, <-done // finished in the meantime
	}
}

// mapErr converts a go-zookeeper error of an operation on path (a store
// path) to an error wrapping the store sentinel, naming the operation and
// the path. c is the client the call used (nil if unknown).
func (s *Store) mapErr(c *client, op, path string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("zkstore: %s %q: %w", op, path, err)
	}
	var sentinel error
	switch {
	case errors.Is(err, store.ErrClosed):
		sentinel = store.ErrClosed
	case errors.Is(err, zk.ErrNoNode):
		if op == "create" {
			sentinel = store.ErrNoParent
		} else {
			sentinel = store.ErrNoNode
		}
	case errors.Is(err, zk.ErrNodeExists):
		sentinel = store.ErrNodeExists
	case errors.Is(err, zk.ErrBadVersion):
		sentinel = store.ErrBadVersion
	case errors.Is(err, zk.ErrNotEmpty):
		sentinel = store.ErrNotEmpty
	case errors.Is(err, zk.ErrNoChildrenForEphemerals):
		sentinel = store.ErrEphemeralChild
	case errors.Is(err, zk.ErrNoAuth):
		sentinel = store.ErrNoAuth
	case errors.Is(err, zk.ErrSessionExpired):
		sentinel = store.ErrSessionExpired
	case errors.Is(err, zk.ErrInvalidPath):
		sentinel = store.ErrBadPath
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrSessionMoved),
		errors.Is(err, io.EOF), isNetErr(err):
		switch {
		case s.isClosed():
			sentinel = store.ErrClosed
		case c != nil && c.d.ctx.Err() != nil:
			// The call's client was retired because its session was lost.
			sentinel = store.ErrSessionExpired
		default:
			return fmt.Errorf("zkstore: %s %q: %w (%v)", op, path, store.ErrConnectionLoss, err)
		}
	default:
		if s.isClosed() {
			sentinel = store.ErrClosed
			break
		}
		return fmt.Errorf("zkstore: %s %q: %w", op, path, err)
	}
	return fmt.Errorf("zkstore: %s %q: %w", op, path, sentinel)
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed)
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
