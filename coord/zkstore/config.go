package zkstore

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

// Defaults applied by Open to zero Config fields.
const (
	// DefaultSessionTimeout is the session timeout requested from ZooKeeper.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds how long Open waits for the first session.
	DefaultConnectTimeout = 15 * time.Second
	// DefaultDialTimeout bounds one TCP connection attempt to one server.
	DefaultDialTimeout = 2 * time.Second
)

// Sentinel errors of this package. Errors returned by Open wrap one of them
// (or a store sentinel) with %w and name the field or endpoint at fault.
var (
	// ErrInvalidConfig reports a Config field that cannot work; the message
	// names the field and the fix.
	ErrInvalidConfig = errors.New("zkstore: invalid config")
	// ErrUnreachable reports that Open got no ZooKeeper session within
	// Config.ConnectTimeout; the message names every address and its last
	// dial error.
	ErrUnreachable = errors.New("zkstore: no ZooKeeper session could be established; check Config.Servers and that the ensemble is up")
)

// Config configures Open. The zero value of every field except Servers is
// usable: Open fills in the documented defaults.
type Config struct {
	// Servers lists the ensemble's client addresses as "host:port"
	// (required). Host names are resolved at every dial, never cached, so
	// a server that moves keeps working.
	Servers []string

	// SessionTimeout is the session timeout requested from ZooKeeper.
	// Default DefaultSessionTimeout (10s). The server clamps it to its
	// [minSessionTimeout, maxSessionTimeout], by default 2x..20x its
	// tickTime; Session().Timeout reports the negotiated value. It is also
	// how long the store stays StateSuspended before it declares
	// StateLost.
	SessionTimeout time.Duration

	// ConnectTimeout bounds how long Open waits for the first session
	// (including AddAuth and creating Root). Default DefaultConnectTimeout
	// (15s). On expiry Open fails with ErrUnreachable naming every address.
	ConnectTimeout time.Duration

	// DialTimeout bounds one TCP connection attempt to one server.
	// Default DefaultDialTimeout (2s).
	DialTimeout time.Duration

	// Root is an optional namespace ("chroot"): every store path is
	// resolved under it, so "/" means Root. Empty or "/" means the real
	// root. Open creates Root (and its ancestors) when missing.
	Root string

	// Auth is optional digest credentials "user:password". When set, the
	// session authenticates with them (the client re-sends them on every
	// reconnect and new session), and every node this store creates carries
	// the ACL digest(user:password) with all permissions, so sessions
	// without these credentials cannot change it.
	Auth string

	// WorldReadable adds world:anyone read permission to the ACL of nodes
	// created with Auth set, so unauthenticated clients (dashboards, the
	// CLI) can read but not write them. Ignored without Auth.
	WorldReadable bool

	// OperatorDigest and WorkerDigest (both "user:base64hash" digest ids,
	// see Digest) split the namespace between two identities: operators
	// (job add, config set, acl fix) and workers (shardflow serve). With
	// both set (and Auth, this process's own identity, one of them), every
	// node this store creates carries ACLFor's ACL: the operator may do
	// anything, the worker may only read the namespace node, job nodes and
	// their config subtrees, so a compromised worker cannot define, change
	// or remove jobs. Default "": one identity (Auth) for everything.
	OperatorDigest string
	WorkerDigest   string

	// NoGroupCommit sends every Multi as a request of its own. By default
	// the Multis made at the same time (many jobs firing in one instant)
	// are committed in a few combined requests (coord/store/groupcommit),
	// each caller getting its own outcome.
	NoGroupCommit bool

	// Logger receives state transitions (Info/Warn) and the ZooKeeper
	// client's own messages (Debug). Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Root == "/" {
		c.Root = ""
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Servers = append([]string(nil), c.Servers...)
	return c
}

// validate checks a defaulted Config.
func (c Config) validate() error {
	if len(c.Servers) == 0 {
		return fmt.Errorf("%w: Servers is empty; list the ensemble as host:port, e.g. []string{\"zk1:2181\"}", ErrInvalidConfig)
	}
	for i, s := range c.Servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return fmt.Errorf("%w: Servers[%d] %q is not host:port: %v", ErrInvalidConfig, i, s, err)
		}
		if host == "" {
			return fmt.Errorf("%w: Servers[%d] %q has no host", ErrInvalidConfig, i, s)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return fmt.Errorf("%w: Servers[%d] %q has port %q; use 1..65535", ErrInvalidConfig, i, s, port)
		}
	}
	if c.SessionTimeout < 0 {
		return fmt.Errorf("%w: SessionTimeout %v is negative; use 0 for the default %v", ErrInvalidConfig, c.SessionTimeout, DefaultSessionTimeout)
	}
	if c.SessionTimeout < time.Millisecond || c.SessionTimeout > time.Duration(1<<31-1)*time.Millisecond {
		return fmt.Errorf("%w: SessionTimeout %v is out of range; use at least 1ms (ZooKeeper clamps to 2x..20x tickTime)", ErrInvalidConfig, c.SessionTimeout)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("%w: ConnectTimeout %v is negative; use 0 for the default %v", ErrInvalidConfig, c.ConnectTimeout, DefaultConnectTimeout)
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("%w: DialTimeout %v is negative; use 0 for the default %v", ErrInvalidConfig, c.DialTimeout, DefaultDialTimeout)
	}
	if c.Root != "" {
		if err := store.ValidatePath(c.Root); err != nil {
			return fmt.Errorf("%w: Root: %w", ErrInvalidConfig, err)
		}
	}
	if (c.OperatorDigest == "") != (c.WorkerDigest == "") || (c.OperatorDigest != "" && c.Auth == "") {
		return fmt.Errorf("%w: OperatorDigest and WorkerDigest go together, with Auth (this process's identity)", ErrInvalidConfig)
	}
	if c.Auth != "" {
		user, _, ok := strings.Cut(c.Auth, ":")
		if !ok || user == "" {
			return fmt.Errorf("%w: Auth must be \"user:password\" with a non-empty user", ErrInvalidConfig)
		}
	}
	return nil
}
