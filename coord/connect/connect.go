// Package connect opens the coordination store named by one setting: a
// ZooKeeper address list ("zk1:2181,zk2:2181") opens coord/zkstore, a
// Postgres URL ("postgres://user:pw@host/db") opens coord/pgstore. The CLI's
// --coord (SHARDFLOW_COORD) and the examples take that one string.
package connect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord/pgstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
)

// ErrInvalidConfig reports a Config that names no store or mixes the two
// stores' options; the message names the field and the fix.
var ErrInvalidConfig = errors.New("connect: invalid config")

// Config configures Open.
type Config struct {
	// Coord names the store (required): ZooKeeper servers as comma-separated
	// host:port, or a Postgres URL starting postgres:// or postgresql://.
	Coord string
	// SessionTimeout is the session timeout; 0 is the store's default
	// (10 s on either).
	SessionTimeout time.Duration
	// ConnectTimeout bounds Open; 0 is the store's default (15 s).
	ConnectTimeout time.Duration
	// Auth is ZooKeeper digest credentials "user:password" (ZooKeeper
	// only: Postgres authenticates the DSN's role).
	Auth string
	// OperatorDigest and WorkerDigest are zkstore.Config's role ACLs
	// (ZooKeeper only: on Postgres, grant the roles instead).
	OperatorDigest, WorkerDigest string
	// Schema is the Postgres schema of the tree; empty is
	// pgstore.DefaultSchema. Ignored for ZooKeeper.
	Schema string
	// Logger receives the store's state transitions; nil is slog.Default().
	Logger *slog.Logger
}

// IsPostgres reports whether coord is a Postgres URL.
func IsPostgres(coord string) bool {
	c := strings.ToLower(strings.TrimSpace(coord))
	return strings.HasPrefix(c, "postgres://") || strings.HasPrefix(c, "postgresql://")
}

// Describe names the store coord selects for messages, without a password:
// "ZooKeeper zk1:2181,zk2:2181" or "Postgres host:5432/db".
func Describe(coord string) string {
	if !IsPostgres(coord) {
		return "ZooKeeper " + strings.TrimSpace(coord)
	}
	u, err := url.Parse(strings.TrimSpace(coord))
	if err != nil {
		return "Postgres (unparsable URL)"
	}
	return "Postgres " + u.Host + u.Path
}

// Servers splits a ZooKeeper address list, dropping empty entries.
func Servers(coord string) []string {
	var out []string
	for _, s := range strings.Split(coord, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Open opens the store cfg.Coord names and returns once its session is
// established (the adapters' Open).
func Open(ctx context.Context, cfg Config) (store.Store, error) {
	coord := strings.TrimSpace(cfg.Coord)
	if coord == "" {
		return nil, fmt.Errorf("%w: Coord is empty; give ZooKeeper servers (zk1:2181,zk2:2181) or a Postgres URL (postgres://user:password@host:5432/db)", ErrInvalidConfig)
	}
	if IsPostgres(coord) {
		if cfg.Auth != "" || cfg.OperatorDigest != "" || cfg.WorkerDigest != "" {
			return nil, fmt.Errorf("%w: Auth, OperatorDigest or WorkerDigest (ZooKeeper ACLs) is set with a Postgres URL; put the role and password in the URL and grant the roles instead (docs/postgres-only.md)", ErrInvalidConfig)
		}
		st, err := pgstore.Open(ctx, pgstore.Config{
			DSN:            coord,
			Schema:         cfg.Schema,
			SessionTimeout: cfg.SessionTimeout,
			ConnectTimeout: cfg.ConnectTimeout,
			Logger:         cfg.Logger,
		})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	if strings.Contains(coord, "://") {
		return nil, fmt.Errorf("%w: Coord %q: unknown scheme; use host:port,... for ZooKeeper or postgres://... for Postgres", ErrInvalidConfig, coord)
	}
	st, err := zkstore.Open(ctx, zkstore.Config{
		Servers:        Servers(coord),
		SessionTimeout: cfg.SessionTimeout,
		ConnectTimeout: cfg.ConnectTimeout,
		Auth:           cfg.Auth,
		OperatorDigest: cfg.OperatorDigest,
		WorkerDigest:   cfg.WorkerDigest,
		Logger:         cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
