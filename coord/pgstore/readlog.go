package pgstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/shardflow/shardflow/coord/store"
)

// origins caches each Store's Origin (one query per Store, at its first
// recorded read).
var origins sync.Map // *Store -> *originOnce

type originOnce struct {
	mu     sync.Mutex
	origin string
}

// Origin names the tree this store holds: the database's system
// identifier, the database and the schema ("pgstore:<sysid>/<db>/<schema>").
// A caller whose own pool has the same identity (OriginOf) shares the
// store's database and can read its tables in its own transactions.
func (s *Store) Origin(ctx context.Context) (string, error) {
	v, _ := origins.LoadOrStore(s, &originOnce{})
	o := v.(*originOnce)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.origin != "" {
		return o.origin, nil
	}
	var db string
	var sysid int64
	if err := s.pool.QueryRow(ctx, originSQL).Scan(&sysid, &db); err != nil {
		return "", fmt.Errorf("pgstore: reading the database's identity: %w", err)
	}
	o.origin = FormatOrigin(sysid, db, s.cfg.Schema)
	return o.origin, nil
}

// originSQL reads what FormatOrigin needs; pg_control_system is executable
// by every role.
const originSQL = `SELECT (SELECT system_identifier FROM pg_control_system()), current_database()`

// OriginSQL is the query, returning (system identifier bigint, database
// text), whose result FormatOrigin turns into the Origin of a store on that
// database: a caller runs it on its own pool to tell whether a store's
// tree lives in its database.
const OriginSQL = originSQL

// FormatOrigin is a Store's Origin for its database's system identifier,
// database name and schema.
func FormatOrigin(sysid int64, db, schema string) string {
	return fmt.Sprintf("pgstore:%d/%s/%s", sysid, db, schema)
}

// recordRead adds a read of p to the store.ReadLog ctx carries, if any. A
// log whose origin cannot be read gets a read of another origin, which
// makes it prove nothing (store.ReadLog.Reads reports !ok).
func (s *Store) recordRead(ctx context.Context, p string, exists bool, st store.Stat) {
	l := store.ReadLogFrom(ctx)
	if l == nil {
		return
	}
	origin, err := s.Origin(ctx)
	if err != nil {
		origin = "pgstore:unknown"
	}
	sess, _ := s.Session()
	l.Record(origin, sess.ID, store.Read{Path: p, Exists: exists, Stat: st})
}
