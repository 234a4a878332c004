package main

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
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/coord/store"
)

// cliLogger keeps the store's connection chatter (INFO) off an operator's
// terminal; warnings and errors still show.
var cliLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// connFlags are the flags of every command that talks to the coordination
// store: --coord (ZooKeeper servers or a postgres:// URL), or --zk.
type connFlags struct {
	coord     string
	zk        string
	namespace string
	auth      string
	timeout   time.Duration
	// sessionTimeout is the ZooKeeper session timeout of long-lived
	// commands (serve registers the flag); 0 is zkstore's default.
	sessionTimeout time.Duration
	authFile       string
	// operatorDigest and workerDigest split the ACLs between operators and
	// workers (zkstore.Config.OperatorDigest, WorkerDigest).
	operatorDigest string
	workerDigest   string
	// allowOpenNamespace skips the refusal of a world-writable namespace
	// (the acl command, which fixes it).
	allowOpenNamespace bool
}

// Environment variables read when the matching flag is absent, as the
// examples and the integration harness read them.
const (
	envCoord     = "SHARDFLOW_COORD"     // --coord
	envZooKeeper = "SHARDFLOW_ZK"        // --zk
	envNamespace = "SHARDFLOW_NAMESPACE" // --namespace
	envAuth      = "SHARDFLOW_ZK_AUTH"   // --auth
	// envOperatorDigest and envWorkerDigest: --operator-digest, --worker-digest.
	envOperatorDigest = "SHARDFLOW_ZK_OPERATOR_DIGEST"
	envWorkerDigest   = "SHARDFLOW_ZK_WORKER_DIGEST"
)

// register adds the connection flags; their defaults come from the
// environment (SHARDFLOW_COORD, SHARDFLOW_ZK, SHARDFLOW_NAMESPACE,
// SHARDFLOW_ZK_AUTH), and a flag given on the command line wins.
func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.coord, "coord", os.Getenv(envCoord), "coordination store: ZooKeeper servers host:port,... or a Postgres URL postgres://user:password@host:5432/db (default $"+envCoord+"; else --zk)")
	fs.StringVar(&c.zk, "zk", os.Getenv(envZooKeeper), "ZooKeeper servers, comma-separated host:port (default $"+envZooKeeper+"; --coord wins when both are set)")
	ns := os.Getenv(envNamespace)
	if ns == "" {
		ns = protocol.DefaultNamespace
	}
	fs.StringVar(&c.namespace, "namespace", ns, "namespace: the root node of the jobs (default $"+envNamespace+", else shardflow)")
	fs.StringVar(&c.auth, "auth", os.Getenv(envAuth), "digest credentials user:password, if the nodes carry ACLs (default $"+envAuth+"; prefer --auth-file or the variable: arguments are visible to every local user)")
	fs.StringVar(&c.authFile, "auth-file", "", "file holding the digest credentials user:password (first line), instead of --auth")
	fs.StringVar(&c.operatorDigest, "operator-digest", os.Getenv(envOperatorDigest), "with --worker-digest: the operators' digest id (`shardflow acl digest`); workers then cannot change job definitions (default $"+envOperatorDigest+")")
	fs.StringVar(&c.workerDigest, "worker-digest", os.Getenv(envWorkerDigest), "with --operator-digest: the workers' digest id (default $"+envWorkerDigest+")")
	fs.DurationVar(&c.timeout, "connect-timeout", 15*time.Second, "how long to try to reach ZooKeeper")
}

// spec returns the store setting: --coord, else --zk.
func (c *connFlags) spec() string {
	if s := strings.TrimSpace(c.coord); s != "" {
		return s
	}
	return strings.TrimSpace(c.zk)
}

// describe names the store for messages, without a password.
func (c *connFlags) describe() string { return connect.Describe(c.spec()) }

// servers returns the store's addresses: the ZooKeeper servers, or the one
// Postgres URL.
func (c *connFlags) servers() ([]string, error) {
	spec := c.spec()
	if connect.IsPostgres(spec) {
		return []string{spec}, nil
	}
	out := connect.Servers(spec)
	if len(out) == 0 {
		return nil, usagef("--coord is required: pass ZooKeeper servers (--coord 127.0.0.1:2181) or a Postgres URL (--coord postgres://user:password@host:5432/db), or set %s (--zk and %s still work)", envCoord, envZooKeeper)
	}
	return out, nil
}

// open connects to the store and returns it and an Admin over it.
func (c *connFlags) open(ctx context.Context) (store.Store, *coord.Admin, error) {
	servers, err := c.servers()
	if err != nil {
		return nil, nil, err
	}
	if err := c.loadAuthFile(); err != nil {
		return nil, nil, err
	}
	st, err := dialStore(ctx, servers, c)
	if err != nil {
		return nil, nil, err
	}
	if !c.allowOpenNamespace {
		if err := refuseOpenNamespace(ctx, st, c.namespace); err != nil {
			_ = st.Close()
			return nil, nil, err
		}
	}
	return st, coord.NewAdmin(st, c.namespace), nil
}

// withAdmin connects to the store, calls fn with an Admin over the
// session, and closes the session when fn returns.
func (c *connFlags) withAdmin(ctx context.Context, fn func(*coord.Admin) error) error {
	st, admin, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(admin)
}

// newFlagSet is the flag set of a command: usage and errors go to stderr,
// and Parse returns a bad flag's error instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// zkFlagSet is the flag set of a command that talks to the store: a
// newFlagSet with the connection flags registered.
func zkFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *connFlags) {
	fs := newFlagSet(name, stderr)
	cf := new(connFlags)
	cf.register(fs)
	return fs, cf
}

// dialStore opens the store session of a command: ZooKeeper or Postgres
// (servers holds the one URL). Tests replace it to run commands on memstore.
var dialStore = func(ctx context.Context, servers []string, c *connFlags) (store.Store, error) {
	spec := strings.Join(servers, ",")
	st, err := connect.Open(ctx, connect.Config{
		Coord:          spec,
		ConnectTimeout: c.timeout,
		SessionTimeout: c.sessionTimeout,
		Auth:           c.auth,
		OperatorDigest: c.operatorDigest,
		WorkerDigest:   c.workerDigest,
		Logger:         cliLogger,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", connect.Describe(spec), err)
	}
	return st, nil
}

// loadAuthFile reads --auth-file into auth: credentials kept out of the
// process's arguments.
func (c *connFlags) loadAuthFile() error {
	if c.authFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.authFile)
	if err != nil {
		return usagef("--auth-file: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if c.auth = strings.TrimSpace(line); !strings.Contains(c.auth, ":") {
		return usagef("--auth-file %s must hold user:password on its first line", c.authFile)
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
