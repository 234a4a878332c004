package store

import "errors"

// ErrTooLarge means a request (usually a Multi) is larger than the store
// accepts in one request: split it (coord does, see RequestLimit).
var ErrTooLarge = errors.New("store: request larger than the store's limit; split it into smaller transactions")

// DefaultRequestLimit is the request size, in bytes, that a store not
// implementing RequestLimiter is assumed to accept: ZooKeeper's default
// jute.maxbuffer (1 MB) minus a margin for the request header.
const DefaultRequestLimit = 1<<20 - 4<<10

// RequestLimiter is the optional capability of a store that states the
// largest request, in bytes as estimated by OpSize, it accepts. Decorators
// forward it.
type RequestLimiter interface {
	MaxRequestBytes() int
}

// RequestLimit returns st's request limit: MaxRequestBytes when st
// implements RequestLimiter and returns a positive value, else
// DefaultRequestLimit.
func RequestLimit(st Store) int {
	if l, ok := st.(RequestLimiter); ok {
		if n := l.MaxRequestBytes(); n > 0 {
			return n
		}
	}
	return DefaultRequestLimit
}

// opOverhead is an upper bound of what an operation adds to a ZooKeeper
// multi request besides its path and data: the multi header (type, done,
// err), length prefixes, version or flags, and a create's ACL list (room
// for a digest ACL), plus a chroot prefix of up to 64 bytes.
const opOverhead = 9 + 4 + 4 + 4 + 4 + 160 + 64

// OpSize estimates, from above, the bytes op adds to a Multi request as
// ZooKeeper encodes it. Stores that enforce a limit (memstore's
// WithMaxRequestBytes) measure requests with it, so that coord's splitting
// and the store agree.
func OpSize(op Op) int {
	switch o := op.(type) {
	case *CreateOp:
		return opOverhead + len(o.Path) + len(o.Data)
	case *SetOp:
		return opOverhead + len(o.Path) + len(o.Data)
	case *DeleteOp:
		return opOverhead + len(o.Path)
	case *CheckOp:
		return opOverhead + len(o.Path)
	}
	return opOverhead
}

// MultiSize is the estimated size of a Multi of ops: the sum of OpSize
// plus the request's own header.
func MultiSize(ops []Op) int {
	n := 32
	for _, op := range ops {
		n += OpSize(op)
	}
	return n
}
