package pgstore

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/coord/store"
)

// Defaults applied by Open to zero Config fields.
const (
	// DefaultSchema is the schema the store's tables live in.
	DefaultSchema = "shardflow_coord"
	// DefaultSessionTimeout is a session's timeout, judged by the database's clock.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds how long Open waits for the first session.
	DefaultConnectTimeout = 15 * time.Second
	// DefaultDialTimeout bounds one connection attempt, authentication included.
	DefaultDialTimeout = 5 * time.Second
	// DefaultMaxConns is the size of the pool that runs the store's calls
	// (the listening connection comes on top).
	DefaultMaxConns = 4
)

// Sentinel errors of this package. Errors returned by Open wrap one of them
// (or a store sentinel) with %w and name the field or endpoint at fault.
var (
	// ErrInvalidConfig reports a Config field that cannot work; the message
	// names the field and the fix.
	ErrInvalidConfig = errors.New("pgstore: invalid config")
	// ErrUnreachable reports that Open got no session within
	// Config.ConnectTimeout; the message names the server and the last error.
	ErrUnreachable = errors.New("pgstore: no session could be established; check Config.DSN and that Postgres is up")
	// ErrPermission reports that the store's database role lacks a grant it
	// needs; the message lists them (docs/postgres-only.md, "Grants").
	ErrPermission = errors.New("pgstore: permission denied")
)

// Config configures Open. The zero value of every field except DSN is
// usable: Open fills in the documented defaults.
type Config struct {
	// DSN is the Postgres connection string, URL ("postgres://...") or
	// key=value form (required).
	DSN string

	// Schema is the schema holding the store's tables; Open creates it and
	// its tables when missing. Default DefaultSchema ("shardflow_coord").
	// Each schema is its own coordination tree: deployments that share a
	// database use a schema each. Lower-case letters, digits and '_', at
	// most 47 characters (the NOTIFY channel adds 16 to a 63-byte limit).
	Schema string

	// SessionTimeout is how long a session outlives its last heartbeat or
	// committed write, as measured by the database's clock
	// (clock_timestamp()). Heartbeats are sent every
	// third of it. It is also how long the store stays StateSuspended
	// before it declares StateLost. Default DefaultSessionTimeout (10s).
	SessionTimeout time.Duration

	// ConnectTimeout bounds how long Open waits for the first session
	// (including the migration). Default DefaultConnectTimeout (15s).
	ConnectTimeout time.Duration

	// DialTimeout bounds one connection attempt. Default DefaultDialTimeout (5s).
	DialTimeout time.Duration

	// MaxConns is the size of the connection pool that runs the store's
	// calls; one more connection listens for watch events and sends the
	// heartbeats. Default DefaultMaxConns (4).
	MaxConns int

	// MaxRequestBytes is the largest Multi, as estimated by store.OpSize,
	// the store accepts (store.RequestLimiter); larger ones fail with
	// store.ErrTooLarge. Default store.DefaultRequestLimit, ZooKeeper's, so
	// that coord splits its transactions the same on either store.
	MaxRequestBytes int

	// Logger receives state transitions (Info/Warn). Default slog.Default().
	Logger *slog.Logger
}

// schemaName allows 47 characters: the NOTIFY channel is "shardflow_coord_"
// and the schema, and Postgres cuts identifiers at 63 bytes (a 50-character
// schema opened, then every write failed: "channel name too long").
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,46}$`)

func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = store.DefaultRequestLimit
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.DSN == "" {
		return fmt.Errorf("%w: DSN is empty; set it to a Postgres connection string such as postgres://user:password@host:5432/db", ErrInvalidConfig)
	}
	if _, err := pgxpool.ParseConfig(c.DSN); err != nil {
		return fmt.Errorf("%w: DSN: %v", ErrInvalidConfig, err)
	}
	if !schemaName.MatchString(c.Schema) {
		return fmt.Errorf("%w: Schema %q: use lower-case letters, digits and '_' (at most 47, not starting with a digit)", ErrInvalidConfig, c.Schema)
	}
	if c.SessionTimeout < 100*time.Millisecond {
		return fmt.Errorf("%w: SessionTimeout %v is too short; use at least 100ms (0 for the default %v)", ErrInvalidConfig, c.SessionTimeout, DefaultSessionTimeout)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("%w: ConnectTimeout %v is negative; use 0 for the default %v", ErrInvalidConfig, c.ConnectTimeout, DefaultConnectTimeout)
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("%w: DialTimeout %v is negative; use 0 for the default %v", ErrInvalidConfig, c.DialTimeout, DefaultDialTimeout)
	}
	if c.MaxConns < 1 {
		return fmt.Errorf("%w: MaxConns %d; use at least 1 (0 for the default %d)", ErrInvalidConfig, c.MaxConns, DefaultMaxConns)
	}
	if c.MaxRequestBytes < 0 {
		return fmt.Errorf("%w: MaxRequestBytes %d is negative; use 0 for the default %d", ErrInvalidConfig, c.MaxRequestBytes, store.DefaultRequestLimit)
	}
	return nil
}
