// Package memstore is an in-process coordination tree with ZooKeeper's
// semantics, implementing store.Store.
//
// A Server holds one tree; Connect opens a session (a *Session, which is a
// store.Store) on it. Several sessions on one Server behave like several
// processes on one ZooKeeper ensemble: ephemeral nodes belong to a session and
// vanish when it is closed or expires, watches are one-shot and fire for other
// sessions' writes, Multi is atomic, and Stat fields (zxids, versions,
// cversion, ephemeral owner, child count) are maintained as ZooKeeper does.
// It is shardflow's embedded default (several servers in one process) and the
// fast, deterministic backend for protocol tests; the conformance suite in
// coord/storetest keeps it honest against real ZooKeeper.
//
// Fault hooks on *Session (Disconnect, Reconnect, Expire) reproduce a cut
// connection, a session expiry past the timeout and a server-side expiry.
//
// Concurrency: every method of Server and Session is safe for concurrent use.
// All state lives under one mutex; calls never block on I/O, so they return at
// once. Watch events are sent on channels of capacity 1 that receive exactly
// one event, so delivery never blocks, and a watcher may call back into the
// store from any goroutine. The only goroutines memstore starts are session
// timeout timers, which Close stops and waits for.
package memstore

import (
	"sync"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// Option configures a Server.
type Option func(*Server)

// WithClock sets the server's clock, used for Stat.Ctime and Stat.Mtime.
// Default time.Now. Tests diverge it from the client's clock to exercise the
// clock check. It is called with the server's lock held: it must not call
// back into the Server.
func WithClock(now func() time.Time) Option {
	return func(s *Server) {
		if now != nil {
			s.clock = now
		}
	}
}

// WithMaxRequestBytes makes Multi refuse, with store.ErrTooLarge, a
// transaction larger than n bytes as store.MultiSize estimates it, as
// ZooKeeper refuses a request beyond its jute.maxbuffer. Sessions report n
// as their MaxRequestBytes, so coord splits its transactions below it.
// Default 0: no limit (and store.DefaultRequestLimit for splitting). Tests
// set a tiny limit to exercise the splitting.
func WithMaxRequestBytes(n int) Option {
	return func(s *Server) { s.maxRequest = n }
}

// Stats counts the requests a Server handled, for benchmarks that measure
// coordination cost. Calls refused before reaching the tree (done ctx,
// closed or disconnected session) are not counted.
type Stats struct {
	// Requests counts every call: each read, write, Multi (once) and Sync.
	Requests int64
	// Reads counts Get, GetW, Exists, ExistsW, Children and ChildrenW calls.
	Reads int64
	// WriteOps counts Create, Set and Delete calls plus every CreateOp,
	// SetOp and DeleteOp inside a Multi, whether or not they succeeded.
	WriteOps int64
	// Multis counts Multi calls.
	Multis int64
	// Watches is the number of watches currently registered (not yet fired).
	Watches int
	// Sessions is the number of live (not closed, not expired) sessions.
	Sessions int
	// Zxid is the last committed transaction id.
	Zxid int64
}

// Server is one in-process coordination tree. The zero value is not usable;
// call NewServer. A Server needs no Close: it owns no goroutine; close its
// sessions.
type Server struct {
	mu    sync.Mutex
	clock func() time.Time
	// maxRequest is the Multi size limit in bytes; 0 means none.
	maxRequest int

	zxid   int64
	nodes  map[string]*node
	lastID int64

	// sessions maps a live session id to its handle.
	sessions map[int64]*Session
	// ephemerals maps a live session id to the paths it owns.
	ephemerals map[int64]map[string]struct{}

	// dataWatches and childWatches are keyed by path; a data watch may wait
	// on a missing path (ExistsW).
	dataWatches  map[string]map[*watch]struct{}
	childWatches map[string]map[*watch]struct{}

	stats Stats
}

type node struct {
	data     []byte
	stat     store.Stat
	children map[string]struct{}
	// seq is the next sequential suffix: the number of children ever
	// created. ZooKeeper 3.8 names sequential nodes this way: deletes raise
	// Stat.Cversion but not the suffix (measured: after 4 creates and a
	// delete, Cversion is 5 and the next suffix 4).
	seq int32
}

// NewServer returns an empty tree holding only the root "/".
func NewServer(opts ...Option) *Server {
	s := &Server{
		clock:        time.Now,
		nodes:        make(map[string]*node),
		sessions:     make(map[int64]*Session),
		ephemerals:   make(map[int64]map[string]struct{}),
		dataWatches:  make(map[string]map[*watch]struct{}),
		childWatches: make(map[string]map[*watch]struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.nodes["/"] = &node{children: make(map[string]struct{})}
	return s
}

// SetClock replaces the server's clock (see WithClock) at run time; nil
// restores time.Now.
func (s *Server) SetClock(now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	s.mu.Lock()
	s.clock = now
	s.mu.Unlock()
}

// Now returns the server's clock reading.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clock()
}

// Stats returns a snapshot of the request counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Zxid = s.zxid
	st.Sessions = len(s.sessions)
	for _, ws := range s.dataWatches {
		st.Watches += len(ws)
	}
	for _, ws := range s.childWatches {
		st.Watches += len(ws)
	}
	return st
}

// WriteCount returns Stats().WriteOps: the write operations requested so far.
func (s *Server) WriteCount() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.WriteOps
}

// newSessionIDLocked allocates a session id. ZooKeeper ids are non-zero
// (zero means "persistent" in Stat.EphemeralOwner); these start high so they
// never look like counters.
func (s *Server) newSessionIDLocked() int64 {
	if s.lastID == 0 {
		s.lastID = 0x100000000
	}
	s.lastID++
	return s.lastID
}
