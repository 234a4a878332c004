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
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
)

// cliLogger keeps the store's connection chatter (INFO) off an operator's
// terminal; warnings and errors still show.
var cliLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// connFlags are the flags of every command that talks to ZooKeeper.
type connFlags struct {
	zk        string
	namespace string
	auth      string
	timeout   time.Duration
	// sessionTimeout is the ZooKeeper session timeout of long-lived
	// commands (serve registers the flag); 0 is zkstore's default.
	sessionTimeout time.Duration
}

// Environment variables read when the matching flag is absent, as the
// examples and the integration harness read them.
const (
	envZooKeeper = "SHARDFLOW_ZK"        // --zk
	envNamespace = "SHARDFLOW_NAMESPACE" // --namespace
	envAuth      = "SHARDFLOW_ZK_AUTH"   // --auth
)

// register adds the connection flags; their defaults come from the
// environment (SHARDFLOW_ZK, SHARDFLOW_NAMESPACE, SHARDFLOW_ZK_AUTH), and a
// flag given on the command line wins.
func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.zk, "zk", os.Getenv(envZooKeeper), "ZooKeeper servers, comma-separated host:port (required; default $"+envZooKeeper+")")
	ns := os.Getenv(envNamespace)
	if ns == "" {
		ns = coord.DefaultNamespace
	}
	fs.StringVar(&c.namespace, "namespace", ns, "namespace: the root node of the jobs (default $"+envNamespace+", else shardflow)")
	fs.StringVar(&c.auth, "auth", os.Getenv(envAuth), "digest credentials user:password, if the nodes carry ACLs (default $"+envAuth+")")
	fs.DurationVar(&c.timeout, "connect-timeout", 15*time.Second, "how long to try to reach ZooKeeper")
}

func (c *connFlags) servers() ([]string, error) {
	var out []string
	for _, s := range strings.Split(c.zk, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, usagef("--zk is required: pass ZooKeeper servers, e.g. --zk 127.0.0.1:2181, or set %s", envZooKeeper)
	}
	return out, nil
}

// open connects to ZooKeeper and returns the store and an Admin over it.
func (c *connFlags) open(ctx context.Context) (store.Store, *coord.Admin, error) {
	servers, err := c.servers()
	if err != nil {
		return nil, nil, err
	}
	st, err := dialStore(ctx, servers, c)
	if err != nil {
		return nil, nil, err
	}
	return st, coord.NewAdmin(st, c.namespace), nil
}

// withAdmin connects to ZooKeeper, calls fn with an Admin over the
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

// zkFlagSet is the flag set of a command that talks to ZooKeeper: a
// newFlagSet with the connection flags registered.
func zkFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *connFlags) {
	fs := newFlagSet(name, stderr)
	cf := new(connFlags)
	cf.register(fs)
	return fs, cf
}

// dialStore opens the store session of a command: ZooKeeper. Tests replace
// it to run commands on memstore.
var dialStore = func(ctx context.Context, servers []string, c *connFlags) (store.Store, error) {
	st, err := zkstore.Open(ctx, zkstore.Config{
		Servers:        servers,
		ConnectTimeout: c.timeout,
		SessionTimeout: c.sessionTimeout,
		Auth:           c.auth,
		Logger:         cliLogger,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to ZooKeeper: %w", err)
	}
	return st, nil
}
