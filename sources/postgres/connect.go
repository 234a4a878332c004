package postgres

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultConnectTimeout bounds one connection attempt when the DSN sets no
// connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// Connect opens a pool on dsn (a URL or key=value DSN) and checks it with
// one connection, so a wrong DSN or an unreachable server fails here and
// not at the first fetch. The attempt is bounded by the DSN's
// connect_timeout, or DefaultConnectTimeout, and by ctx. Errors wrap
// ErrUnreachable (or ErrConfig for a DSN that does not parse) and name
// host:port. maxConns <= 0 keeps pgxpool's default (max(4, NumCPU)).
// The caller closes the pool.
func Connect(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn redacts the password in its parse errors.
		return nil, fmt.Errorf("%w: the Postgres DSN does not parse; use postgres://user@host:port/db: %w", ErrConfig, err)
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	addr := endpoint(cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrUnreachable, addr, err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout+time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, addr, ctx.Err())
		}
		return nil, fmt.Errorf("%w at %s (connect timeout %s): %w", ErrUnreachable, addr, cfg.ConnConfig.ConnectTimeout, err)
	}
	return pool, nil
}

func endpoint(c pgconn.Config) string {
	host := c.Host
	if len(host) > 0 && host[0] == '/' {
		return host + "/.s.PGSQL." + strconv.Itoa(int(c.Port))
	}
	return net.JoinHostPort(host, strconv.Itoa(int(c.Port)))
}
