// Package store defines the coordination store that every shardflow protocol
// runs on: a ZooKeeper-shaped tree of versioned nodes with persistent,
// ephemeral and sequential nodes, one-shot watches, multi-op transactions and
// an observable session.
//
// Two adapters implement Store: coord/zkstore (ZooKeeper, production) and
// coord/memstore (in-process, the embedded default and fast tests). Both pass
// the single conformance suite in coord/storetest, so code written against
// this interface behaves the same on either.
//
// Paths are absolute and slash-separated ("/ns/job/config"); the root "/"
// always exists. A Store is one session: ephemeral nodes belong to it, and
// they vanish when the session is closed or expires.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// AnyVersion matches every version in Set, Delete and CheckOp.
const AnyVersion int32 = -1

// Sentinel errors. Adapters wrap them (with %w) so callers test with errors.Is.
var (
	ErrNoNode         = errors.New("store: node does not exist")
	ErrNodeExists     = errors.New("store: node already exists")
	ErrBadVersion     = errors.New("store: version conflict: the node changed since it was read; re-read and retry")
	ErrNotEmpty       = errors.New("store: node has children; delete them first")
	ErrEphemeralChild = errors.New("store: ephemeral nodes cannot have children")
	ErrNoParent       = errors.New("store: parent node does not exist; create it first")
	// ErrConnectionLoss means the outcome of a call is unknown: the session
	// may still be alive. Retry once the session is StateConnected again.
	ErrConnectionLoss = errors.New("store: connection to the coordination service lost; retry when reconnected")
	// ErrSessionExpired means the session ended: its ephemeral nodes and
	// watches are gone. The adapter opens a new session by itself.
	ErrSessionExpired = errors.New("store: session expired; ephemeral nodes are gone and must be re-created")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("store: closed")
	// ErrNoAuth means the node's ACL refuses this session.
	ErrNoAuth = errors.New("store: not authorized by the node's ACL; check the digest credentials")
	// ErrBadPath names a malformed path.
	ErrBadPath = errors.New("store: invalid path; paths are absolute, slash-separated, without a trailing slash")
)

// Mode is the kind of node Create makes.
type Mode int

// Node modes, as in ZooKeeper.
const (
	// Persistent nodes live until deleted.
	Persistent Mode = iota
	// Ephemeral nodes are deleted when the creating session ends.
	Ephemeral
	// PersistentSequential appends a monotonically increasing 10-digit
	// counter, unique among the parent's children, to the name.
	PersistentSequential
	// EphemeralSequential is Ephemeral plus the sequential suffix.
	EphemeralSequential
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Persistent:
		return "persistent"
	case Ephemeral:
		return "ephemeral"
	case PersistentSequential:
		return "persistent-sequential"
	case EphemeralSequential:
		return "ephemeral-sequential"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// IsEphemeral reports whether nodes of this mode die with their session.
func (m Mode) IsEphemeral() bool { return m == Ephemeral || m == EphemeralSequential }

// IsSequential reports whether the name gets a sequence suffix.
func (m Mode) IsSequential() bool { return m == PersistentSequential || m == EphemeralSequential }

// Stat is a node's metadata.
type Stat struct {
	// Czxid and Mzxid are the transaction ids that created and last modified
	// the node. They grow monotonically across the whole tree, which makes
	// them usable as fencing epochs.
	Czxid, Mzxid int64
	// Ctime and Mtime are the coordination service's clock at creation and
	// last modification (the clock check compares Mtime with the local clock).
	Ctime, Mtime time.Time
	// Pzxid is the transaction id of the last change to the node's
	// children (a child created or deleted; its creation's zxid before
	// any): a reader compares it with another node's Mzxid to tell whether
	// the children changed after that node was written.
	Pzxid int64
	// Version counts data changes; Cversion counts child changes.
	Version, Cversion int32
	// EphemeralOwner is the owning session's id, 0 for persistent nodes.
	EphemeralOwner int64
	// NumChildren is the number of direct children.
	NumChildren int32
}

// EventType is what a watch saw.
type EventType int

// Watch event types.
const (
	EventNodeCreated EventType = iota + 1
	EventNodeDeleted
	EventNodeDataChanged
	EventNodeChildrenChanged
	// EventNotWatching is delivered when the watch was dropped without
	// firing: the session expired or the store was closed. Re-read and re-arm.
	EventNotWatching
)

// String names the event type.
func (t EventType) String() string {
	switch t {
	case EventNodeCreated:
		return "created"
	case EventNodeDeleted:
		return "deleted"
	case EventNodeDataChanged:
		return "data-changed"
	case EventNodeChildrenChanged:
		return "children-changed"
	case EventNotWatching:
		return "not-watching"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is delivered once on a watch channel. Watch channels are buffered
// (capacity 1), receive exactly one Event, and are never closed.
type Event struct {
	Type EventType
	Path string
	// Err is set with EventNotWatching (ErrSessionExpired or ErrClosed).
	Err error
}

// State is the state of a Store's session.
type State int

// Session states, after Curator's connection states.
const (
	// StateConnecting: no session established yet.
	StateConnecting State = iota
	// StateConnected: the session is live; calls go through.
	StateConnected
	// StateSuspended: the connection is down but the session may still be
	// alive; ephemeral nodes may still exist. Do not start new work.
	StateSuspended
	// StateLost: the session expired, or the connection has been down for
	// longer than the session timeout. Ephemeral nodes must be presumed gone
	// and owned work must stop. The adapter keeps reconnecting and moves to
	// StateConnected with a NEW session id when it can.
	StateLost
	// StateClosed: Close was called. Terminal.
	StateClosed
)

// String names the state.
func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateSuspended:
		return "suspended"
	case StateLost:
		return "lost"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Session describes a Store's session at one moment.
type Session struct {
	// ID is the session id; it changes when a new session replaces a lost one.
	ID int64
	// State is the connection state.
	State State
	// Timeout is the negotiated session timeout.
	Timeout time.Duration
}

// Op is one operation of a Multi transaction: *CreateOp, *SetOp, *DeleteOp or *CheckOp.
type Op interface{ isOp() }

// OpPath is the path op acts on ("" for an unknown Op): adapters name it in
// the errors of a Multi.
func OpPath(op Op) string {
	switch o := op.(type) {
	case *CreateOp:
		return o.Path
	case *SetOp:
		return o.Path
	case *DeleteOp:
		return o.Path
	case *CheckOp:
		return o.Path
	}
	return ""
}

// CreateOp creates a node inside Multi.
type CreateOp struct {
	Path string
	Data []byte
	Mode Mode
}

// SetOp sets a node's data inside Multi; Version AnyVersion matches any.
type SetOp struct {
	Path    string
	Data    []byte
	Version int32
}

// DeleteOp deletes a node inside Multi; Version AnyVersion matches any.
type DeleteOp struct {
	Path    string
	Version int32
}

// CheckOp fails the whole Multi unless the node exists with Version
// (AnyVersion: unless it exists). With writes, it makes a fenced write.
type CheckOp struct {
	Path    string
	Version int32
}

func (*CreateOp) isOp() {}
func (*SetOp) isOp()    {}
func (*DeleteOp) isOp() {}
func (*CheckOp) isOp()  {}

// OpResult is the outcome of one operation of a successful Multi.
type OpResult struct {
	// Path is the created path for CreateOp (with the sequence suffix), else the op's path.
	Path string
	// Stat is the node's stat after SetOp; zero otherwise.
	Stat Stat
}

// MultiError reports which operation made a Multi fail. Nothing was applied.
// It unwraps to the operation's error, so errors.Is(err, ErrNodeExists) works.
type MultiError struct {
	Index int
	Op    Op
	Err   error
}

// Error names the failing operation.
func (e *MultiError) Error() string {
	return fmt.Sprintf("store: multi op %d (%s) failed: %v", e.Index, opString(e.Op), e.Err)
}

// Unwrap returns the failing operation's error.
func (e *MultiError) Unwrap() error { return e.Err }

func opString(op Op) string {
	switch o := op.(type) {
	case *CreateOp:
		return "create " + o.Path
	case *SetOp:
		return "set " + o.Path
	case *DeleteOp:
		return "delete " + o.Path
	case *CheckOp:
		return "check " + o.Path
	}
	return fmt.Sprintf("%T", op)
}

// Store is one session on a coordination tree. All methods are safe for
// concurrent use. ctx bounds how long a call waits; when it ends first the
// call returns ctx.Err() and its outcome is unknown (like ErrConnectionLoss).
type Store interface {
	// Create makes a node and returns its path (with the suffix for
	// sequential modes). The parent must exist (ErrNoParent).
	Create(ctx context.Context, path string, data []byte, mode Mode) (string, error)
	// Get returns a node's data and stat.
	Get(ctx context.Context, path string) ([]byte, Stat, error)
	// GetW is Get plus a one-shot watch for data change or deletion.
	GetW(ctx context.Context, path string) ([]byte, Stat, <-chan Event, error)
	// Exists reports whether a node exists; a missing node is not an error.
	Exists(ctx context.Context, path string) (bool, Stat, error)
	// ExistsW is Exists plus a one-shot watch; on a missing node it fires on creation.
	ExistsW(ctx context.Context, path string) (bool, Stat, <-chan Event, error)
	// Children lists a node's direct children's names, sorted.
	Children(ctx context.Context, path string) ([]string, Stat, error)
	// ChildrenW is Children plus a one-shot watch for child changes or deletion.
	ChildrenW(ctx context.Context, path string) ([]string, Stat, <-chan Event, error)
	// Set replaces a node's data if its version matches.
	Set(ctx context.Context, path string, data []byte, version int32) (Stat, error)
	// Delete removes a childless node if its version matches.
	Delete(ctx context.Context, path string, version int32) error
	// Multi applies all operations atomically, or none (*MultiError).
	Multi(ctx context.Context, ops ...Op) ([]OpResult, error)
	// Sync makes later reads on this session see every write committed
	// before Sync was called (ZooKeeper's sync); used before fencing checks.
	Sync(ctx context.Context, path string) error
	// Session returns the current session and a channel that is closed at
	// the next change of ID or State. It never drops a change: re-read after
	// the channel closes.
	Session() (Session, <-chan struct{})
	// Close ends the session at once (its ephemeral nodes vanish), fires
	// pending watches with EventNotWatching and makes later calls fail with
	// ErrClosed. Safe to call twice.
	Close() error
}
