package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/connect"
	"github.com/shardflow/shardflow/coord/store"
)

// Logger keeps the store's connection chatter (INFO) off an operator's
// terminal; warnings and errors still show.
var Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// ConnFlags are the flags of every command that talks to the coordination
// store: --coord (ZooKeeper servers or a postgres:// URL), or --zk.
type ConnFlags struct {
	Coord     string
	ZK        string
	Namespace string
	Auth      string
	Timeout   time.Duration
	// SessionTimeout is the ZooKeeper session timeout of long-lived
	// commands (serve registers the flag); 0 is zkstore's default.
	SessionTimeout time.Duration
	AuthFile       string
	// OperatorDigest and workerDigest split the ACLs between operators and
	// workers (zkstore.Config.OperatorDigest, WorkerDigest).
	OperatorDigest string
	WorkerDigest   string
	// AllowOpenNamespace skips the refusal of a world-writable namespace
	// (the acl command, which fixes it).
	AllowOpenNamespace bool
}

// Environment variables read when the matching flag is absent, as the
// examples and the integration harness read them.
const (
	EnvCoord     = "SHARDFLOW_COORD"     // --coord
	EnvZooKeeper = "SHARDFLOW_ZK"        // --zk
	EnvNamespace = "SHARDFLOW_NAMESPACE" // --namespace
	EnvAuth      = "SHARDFLOW_ZK_AUTH"   // --auth
	// envOperatorDigest and envWorkerDigest: --operator-digest, --worker-digest.
	EnvOperatorDigest = "SHARDFLOW_ZK_OPERATOR_DIGEST"
	EnvWorkerDigest   = "SHARDFLOW_ZK_WORKER_DIGEST"
)

// Register adds the connection flags; their defaults come from the
// environment (SHARDFLOW_COORD, SHARDFLOW_ZK, SHARDFLOW_NAMESPACE,
// SHARDFLOW_ZK_AUTH), and a flag given on the command line wins.
func (c *ConnFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Coord, "coord", os.Getenv(EnvCoord), "coordination store: ZooKeeper servers host:port,... or a Postgres URL postgres://user:password@host:5432/db (default $"+EnvCoord+"; else --zk)")
	fs.StringVar(&c.ZK, "zk", os.Getenv(EnvZooKeeper), "ZooKeeper servers, comma-separated host:port (default $"+EnvZooKeeper+"; --coord wins when both are set)")
	ns := os.Getenv(EnvNamespace)
	if ns == "" {
		ns = coord.DefaultNamespace
	}
	fs.StringVar(&c.Namespace, "namespace", ns, "namespace: the root node of the jobs (default $"+EnvNamespace+", else shardflow)")
	fs.StringVar(&c.Auth, "auth", os.Getenv(EnvAuth), "digest credentials user:password, if the nodes carry ACLs (default $"+EnvAuth+"; prefer --auth-file or the variable: arguments are visible to every local user)")
	fs.StringVar(&c.AuthFile, "auth-file", "", "file holding the digest credentials user:password (first line), instead of --auth")
	fs.StringVar(&c.OperatorDigest, "operator-digest", os.Getenv(EnvOperatorDigest), "with --worker-digest: the operators' digest id (`shardflow acl digest`); workers then cannot change job definitions (default $"+EnvOperatorDigest+")")
	fs.StringVar(&c.WorkerDigest, "worker-digest", os.Getenv(EnvWorkerDigest), "with --operator-digest: the workers' digest id (default $"+EnvWorkerDigest+")")
	fs.DurationVar(&c.Timeout, "connect-timeout", 15*time.Second, "how long to try to reach ZooKeeper")
}

// Spec returns the store setting: --coord, else --zk.
func (c *ConnFlags) Spec() string {
	if s := strings.TrimSpace(c.Coord); s != "" {
		return s
	}
	return strings.TrimSpace(c.ZK)
}

// Describe names the store for messages, without a password.
func (c *ConnFlags) Describe() string { return connect.Describe(c.Spec()) }

// Servers returns the store's addresses: the ZooKeeper servers, or the one
// Postgres URL.
func (c *ConnFlags) Servers() ([]string, error) {
	spec := c.Spec()
	if connect.IsPostgres(spec) {
		return []string{spec}, nil
	}
	out := connect.Servers(spec)
	if len(out) == 0 {
		return nil, Usagef("--coord is required: pass ZooKeeper servers (--coord 127.0.0.1:2181) or a Postgres URL (--coord postgres://user:password@host:5432/db), or set %s (--zk and %s still work)", EnvCoord, EnvZooKeeper)
	}
	return out, nil
}

// Open connects to the store and returns it and an Admin over it.
func (c *ConnFlags) Open(ctx context.Context) (store.Store, *coord.Admin, error) {
	servers, err := c.Servers()
	if err != nil {
		return nil, nil, err
	}
	if err := c.LoadAuthFile(); err != nil {
		return nil, nil, err
	}
	st, err := DialStore(ctx, servers, c)
	if err != nil {
		return nil, nil, err
	}
	if !c.AllowOpenNamespace {
		if err := refuseOpenNamespace(ctx, st, c.Namespace); err != nil {
			_ = st.Close()
			return nil, nil, err
		}
	}
	return st, coord.NewAdmin(st, c.Namespace), nil
}

// WithAdmin connects to the store, calls fn with an Admin over the
// session, and closes the session when fn returns.
func (c *ConnFlags) WithAdmin(ctx context.Context, fn func(*coord.Admin) error) error {
	st, admin, err := c.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(admin)
}

// NewFlagSet is the flag set of a command: usage and errors go to stderr,
// and Parse returns a bad flag's error instead of exiting.
func NewFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// ZKFlagSet is the flag set of a command that talks to the store: a
// NewFlagSet with the connection flags registered.
func ZKFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *ConnFlags) {
	fs := NewFlagSet(name, stderr)
	cf := new(ConnFlags)
	cf.Register(fs)
	return fs, cf
}

// DialStore opens the store session of a command: ZooKeeper or Postgres
// (servers holds the one URL). Tests replace it to run commands on memstore.
var DialStore = func(ctx context.Context, servers []string, c *ConnFlags) (store.Store, error) {
	spec := strings.Join(servers, ",")
	st, err := connect.Open(ctx, connect.Config{
		Coord:          spec,
		ConnectTimeout: c.Timeout,
		SessionTimeout: c.SessionTimeout,
		Auth:           c.Auth,
		OperatorDigest: c.OperatorDigest,
		WorkerDigest:   c.WorkerDigest,
		Logger:         Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", connect.Describe(spec), err)
	}
	return st, nil
}

// LoadAuthFile reads --auth-file into auth: credentials kept out of the
// process's arguments.
func (c *ConnFlags) LoadAuthFile() error {
	if c.AuthFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.AuthFile)
	if err != nil {
		return Usagef("--auth-file: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if c.Auth = strings.TrimSpace(line); !strings.Contains(c.Auth, ":") {
		return Usagef("--auth-file %s must hold user:password on its first line", c.AuthFile)
	}
	return nil
}

// openNamespaceChecker is the ACL capability of a store (zkstore).
type openNamespaceChecker interface {
	Authenticated() bool
	WorldWritable(ctx context.Context, path string) (bool, error)
}

// refuseOpenNamespace refuses to use a namespace anyone may write when
// this process authenticates (--auth): ACLs are then meant to protect it,
// and a namespace made before --auth (or squatted) does not; anyone could
// add jobs that every worker runs.
func refuseOpenNamespace(ctx context.Context, st store.Store, namespace string) error {
	as, ok := st.(openNamespaceChecker)
	if !ok || !as.Authenticated() {
		return nil
	}
	open, err := as.WorldWritable(ctx, store.Join(namespace))
	if err != nil {
		return fmt.Errorf("read the ACL of namespace %s: %w", store.Join(namespace), err)
	}
	if open {
		return fmt.Errorf("namespace %s is world-writable (ACL world:anyone), though --auth is set: anyone who reaches ZooKeeper can add or change jobs. "+
			"Check its jobs, then run `shardflow acl fix --namespace %s` with the operator's --auth to re-apply the ACLs", store.Join(namespace), namespace)
	}
	return nil
}
