package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/shardflow/shardflow/internal/testwait"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
)

// defaultTickTime is the ZooKeeper tickTime the harness configures. The server
// clamps session timeouts to 2..20 ticks, so 500ms allows 1 s sessions for fast
// failover tests.
const defaultTickTime = 500 * time.Millisecond

// Option configures a ZooKeeper started by [StartZooKeeper] or [StartEnsemble].
type Option func(*zkConfig)

type zkConfig struct {
	image    string
	tickTime time.Duration
	env      map[string]string
}

// WithTickTime sets the server's tickTime (default 500ms: sessions as short as 1 s, for fast failover tests).
func WithTickTime(d time.Duration) Option { return func(c *zkConfig) { c.tickTime = d } }

// WithImage sets the image, overriding SHARDFLOW_ZK_IMAGE and the default
// "zookeeper:3.9".
func WithImage(image string) Option { return func(c *zkConfig) { c.image = image } }

// WithServerEnv adds an environment variable of the official image (for
// example ZOO_CFG_EXTRA="zookeeper.extendedTypesEnabled=true").
func WithServerEnv(key, value string) Option {
	return func(c *zkConfig) { c.env[key] = value }
}

func newZKConfig(opts []Option) zkConfig {
	c := zkConfig{image: envOr(envZooKeeperImg, defaultZooKeeperImage), tickTime: defaultTickTime, env: map[string]string{}}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// ZooKeeper is one ZooKeeper server: a container owned by the test, or a
// server named by SHARDFLOW_ZK. Methods are safe for concurrent use.
type ZooKeeper struct {
	servers []string
	name    string // container alias inside an ensemble network
	restartable
}

// StartZooKeeper starts one ZooKeeper server in a container and returns once
// it answers `ruok` with `imok` and `srvr` shows it serving; the container is removed in t.Cleanup. When
// SHARDFLOW_ZK is set it starts nothing and returns that server, not
// controllable. It skips the test when Docker is missing, unless
// SHARDFLOW_REQUIRE_DOCKER is set, and fails it when the server cannot start.
func StartZooKeeper(t testing.TB, opts ...Option) *ZooKeeper {
	t.Helper()
	if z := zkFromEnv(); z != nil {
		return z
	}
	requireDocker(t, "ZooKeeper", envZooKeeper)
	cfg := newZKConfig(opts)
	z, err := startZKContainer(t, cfg, false, nil, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func zkFromEnv() *ZooKeeper {
	v := os.Getenv(envZooKeeper)
	if v == "" {
		return nil
	}
	var servers []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	return &ZooKeeper{servers: servers, restartable: restartable{running: true}}
}

// startZKContainer runs one server. With nw set it joins that network under
// alias name with id myID and ensemble members servers; shared containers are
// not registered for t.Cleanup (Main removes them).
func startZKContainer(t testing.TB, cfg zkConfig, shared bool, nw *testcontainers.DockerNetwork, myID int, zooServers string) (*ZooKeeper, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := checkImage(ctx, cfg.image, envZooKeeper); err != nil {
		return nil, err
	}
	env := map[string]string{
		"ZOO_MY_ID":                  fmt.Sprint(myID),
		"ZOO_TICK_TIME":              fmt.Sprint(cfg.tickTime.Milliseconds()),
		"ZOO_4LW_COMMANDS_WHITELIST": "*",
		"ZOO_ADMINSERVER_ENABLED":    "false",
		// maxSessionTimeout: up to 60 s sessions (default 20 ticks, 10 s),
		// for tests whose sessions only their own faults may end.
		// forceSync=no: the transaction log is written without an fsync
		// per write (a test server's data must survive a restart of the
		// server, which the page cache does, not of the machine): on a
		// shared disk the fsyncs, not the protocol, set the pace of
		// every write.
		"ZOO_CFG_EXTRA":  "quorumListenOnAllIPs=true maxSessionTimeout=60000 forceSync=no",
		"ZOO_INIT_LIMIT": "10",
		"ZOO_SYNC_LIMIT": "5",
		// No cap on connections per client address (default 60): every
		// test connection reaches the container from one address, and
		// the seeded simulation runs many schedules of up to 9 sessions
		// each against one server.
		"ZOO_MAX_CLIENT_CNXNS": "0",
	}
	if zooServers != "" {
		env["ZOO_SERVERS"] = zooServers
	}
	for k, v := range cfg.env {
		env[k] = v
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		opts := []testcontainers.ContainerCustomizer{
			containerLogger(t, shared),
			testcontainers.WithEnv(env),
			testcontainers.WithExposedPorts("2181/tcp"),
			testcontainers.WithLabels(map[string]string{containerLabel: "true"}),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = network.PortMap{
					network.MustParsePort("2181/tcp"): {{HostIP: netipLoopback, HostPort: fmt.Sprint(port)}},
				}
			}),
		}
		name := ""
		if nw != nil {
			name = fmt.Sprintf("zk%d", myID)
			opts = append(opts, tcnetwork.WithNetwork([]string{name}, nw))
		}
		ctr, err := testcontainers.Run(ctx, cfg.image, opts...)
		if !shared {
			testcontainers.CleanupContainer(t, ctr)
		}
		if err != nil {
			if shared && ctr != nil {
				_ = testcontainers.TerminateContainer(ctr)
			}
			lastErr = err
			if isPortConflict(err) {
				continue
			}
			return nil, fmt.Errorf("integration: start ZooKeeper container from %s: %w (%s)", cfg.image, err, imageHint(cfg.image, envZooKeeperImg, envZooKeeper))
		}
		z := &ZooKeeper{servers: []string{hostPort(port)}, name: name, restartable: restartable{ctr: ctr, running: true}}
		if nw == nil { // ensemble members wait for a quorum instead.
			if err := waitRuok(ctx, z.servers[0]); err != nil {
				err = fmt.Errorf("integration: ZooKeeper container at %s did not serve: %w\n%s", z.servers[0], err, containerLogs(ctr))
				if shared {
					_ = testcontainers.TerminateContainer(ctr)
				}
				return nil, err
			}
		}
		return z, nil
	}
	return nil, fmt.Errorf("integration: start ZooKeeper container: no free host port after 3 tries: %w", lastErr)
}

// Servers returns the client addresses (host:port) reachable from the host.
// For a container it is one address on 127.0.0.1 that stays the same across
// Stop and Start.
func (z *ZooKeeper) Servers() []string { return append([]string(nil), z.servers...) }

// Controllable reports whether the harness owns the server, so that Stop and
// Start work. It is false for servers named by SHARDFLOW_ZK.
func (z *ZooKeeper) Controllable() bool { return z.ctr != nil }

// RequireControl skips the test, saying why, when the server is not
// controllable: fault tests that stop servers call it first.
func (z *ZooKeeper) RequireControl(t testing.TB) {
	t.Helper()
	if !z.Controllable() {
		t.Skipf("integration: this test stops ZooKeeper servers, but the server comes from %s=%s; unset it to run against a container", envZooKeeper, os.Getenv(envZooKeeper))
	}
}

// Stop stops the server's container (SIGTERM, SIGKILL after 10 s) and keeps its
// data. It blocks until the container has exited or ctx ends. Stopping a
// stopped server is a no-op. It returns [ErrNotControllable] when the server
// is not the harness's.
func (z *ZooKeeper) Stop(ctx context.Context) error {
	return z.stop(ctx, "ZooKeeper "+z.servers[0])
}

// Start starts a stopped server again, with its data and on the same host
// port, and blocks until it answers `ruok` (a member of an ensemble: until it
// serves as leader or follower) or ctx ends. Starting a running server is a
// no-op.
func (z *ZooKeeper) Start(ctx context.Context) error {
	wait := waitRuok
	if z.name != "" {
		wait = waitServing
	}
	return z.start(ctx, "ZooKeeper "+z.servers[0], func(ctx context.Context) error { return wait(ctx, z.servers[0]) })
}

// FourLetterWord sends a four-letter command (ruok, srvr, mntr, cons, ...) to
// the first server and returns its reply. It blocks until the server closes
// the connection or ctx ends.
func (z *ZooKeeper) FourLetterWord(ctx context.Context, cmd string) (string, error) {
	return FourLetterWord(ctx, z.servers[0], cmd)
}

// FourLetterWord sends a four-letter command to the ZooKeeper server at addr
// and returns its whole reply. The server must whitelist the command
// (4lw.commands.whitelist; the harness's containers allow all). It blocks
// until the server closes the connection or ctx ends (5 s when ctx has no
// deadline).
func FourLetterWord(ctx context.Context, addr, cmd string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("integration: %s to ZooKeeper %s: %w", cmd, addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", fmt.Errorf("integration: %s to ZooKeeper %s: %w", cmd, addr, err)
	}
	reply, err := io.ReadAll(bufio.NewReader(conn))
	if err != nil {
		return string(reply), fmt.Errorf("integration: %s reply from ZooKeeper %s: %w", cmd, addr, err)
	}
	return string(reply), nil
}

// attemptTimeout bounds one readiness probe: while a container starts,
// Docker's port proxy may accept a connection that nothing answers.
const attemptTimeout = 3 * time.Second

// errNotServing means a server answered but is not serving clients yet.
var errNotServing = errors.New("integration: ZooKeeper is not serving yet")

// waitRuok polls until the server answers ruok with imok and serves clients
// (srvr reports a Mode).
func waitRuok(ctx context.Context, addr string) error {
	return testwait.Poll(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		reply, err := FourLetterWord(ctx, addr, "ruok")
		if err != nil {
			return err
		}
		if reply != "imok" {
			return fmt.Errorf("%w: ruok answered %q", errNotServing, reply)
		}
		// imok only says the process runs: it comes before the database is
		// loaded. A Mode line in srvr means it serves clients.
		_, err = ServerMode(ctx, addr)
		return err
	})
}

// ServerMode returns the Mode line of `srvr` (leader, follower, standalone,
// observer), or an error when the server does not serve clients.
func ServerMode(ctx context.Context, addr string) (string, error) {
	reply, err := FourLetterWord(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(reply) {
		if mode, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
			return mode, nil
		}
	}
	return "", fmt.Errorf("%w: srvr answered %q", errNotServing, strings.TrimSpace(reply))
}

func waitServing(ctx context.Context, addr string) error {
	return testwait.Poll(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		mode, err := ServerMode(ctx, addr)
		if err != nil {
			return err
		}
		if mode != "leader" && mode != "follower" {
			return fmt.Errorf("%w: mode %s", errNotServing, mode)
		}
		return nil
	})
}

// containerLogs returns the container's output for a failure message.
func containerLogs(ctr *testcontainers.DockerContainer) string {
	if ctr == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(container logs unavailable: %v)", err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
	return "container output:\n" + string(b)
}

// netipLoopback is the host address containers publish their ports on.
var netipLoopback = netip.MustParseAddr("127.0.0.1")

// DirectServers returns the container's own address on Docker's bridge
// network (ip:2181), reachable from the host without Docker's userland port
// proxy between them, as a production client reaches its ensemble. It
// changes when the container restarts: for measurements, not fault tests.
func (z *ZooKeeper) DirectServers(ctx context.Context) ([]string, error) {
	if z.ctr == nil {
		return z.Servers(), nil
	}
	ip, err := z.ctr.ContainerIP(ctx)
	if err != nil {
		return nil, fmt.Errorf("integration: ZooKeeper container address: %w", err)
	}
	return []string{net.JoinHostPort(ip, "2181")}, nil
}
