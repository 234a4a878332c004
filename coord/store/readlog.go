package store

import (
	"context"
	"sync"
)

// ReadLog records the node reads a store makes on behalf of a context
// carrying it (WithReadLog): the path, whether the node existed, its stat,
// and the session and store the read was made under. A caller that keeps
// its data in the same database as the store (sources/postgres on
// coord/pgstore) runs a fencing check (Run.CheckOwnership) with a ReadLog,
// and afterwards verifies inside its own data transaction that every node
// read is unchanged and the session alive: the check's verdict then still
// holds at that transaction's commit, without asking the store again.
//
// This is sound only because the fencing check is a function of the nodes
// it reads through the store with its ctx and of the session: a check that
// answered from a cache would leave the log short. Stores that cannot be
// checked from outside (ZooKeeper, memstore) record nothing; an empty
// log means "ask the store".
type ReadLog struct {
	mu    sync.Mutex
	reads []Read
	// origin names the store that recorded the reads ("" when none did);
	// mixed reports reads recorded by different stores or sessions.
	origin  string
	session int64
	mixed   bool
}

// Read is one node read recorded in a ReadLog.
type Read struct {
	// Path is the node's path.
	Path string
	// Exists is false when the node did not exist (Stat is then zero).
	Exists bool
	// Stat is the node's stat as read.
	Stat Stat
}

type readLogKey struct{}

// WithReadLog returns ctx carrying log: a store that supports it records
// every node read (Get, Exists and their watch forms) made with the
// returned context.
func WithReadLog(ctx context.Context, log *ReadLog) context.Context {
	return context.WithValue(ctx, readLogKey{}, log)
}

// ReadLogFrom returns the ReadLog ctx carries, nil when none.
func ReadLogFrom(ctx context.Context) *ReadLog {
	l, _ := ctx.Value(readLogKey{}).(*ReadLog)
	return l
}

// Record adds a read made by the store named origin under session. Stores
// call it; origin must name the database and tree well enough that equal
// origins are the same tree (pgstore: its database's identity and schema).
func (l *ReadLog) Record(origin string, session int64, r Read) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reads) == 0 && !l.mixed {
		l.origin, l.session = origin, session
	} else if origin != l.origin || session != l.session {
		l.mixed = true
	}
	l.reads = append(l.reads, r)
}

// Reads returns the store that recorded the reads, the session they were
// made under, and the reads in the order they were recorded. ok is false
// when nothing was recorded, or when reads came from different stores or
// sessions (the log then proves nothing).
func (l *ReadLog) Reads() (origin string, session int64, reads []Read, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reads) == 0 || l.mixed {
		return "", 0, nil, false
	}
	return l.origin, l.session, append([]Read(nil), l.reads...), true
}
