package integration_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

// connectZK opens a go-zookeeper session and waits until it has one.
func connectZK(t *testing.T, servers []string, timeout time.Duration) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	conn, events, err := zk.Connect(servers, timeout, zk.WithLogger(zkTestLogger{t}))
	if err != nil {
		t.Fatalf("zk.Connect(%v): %v", servers, err)
	}
	t.Cleanup(conn.Close)
	awaitState(t, events, zk.StateHasSession, 30*time.Second)
	return conn, events
}

func awaitState(t *testing.T, events <-chan zk.Event, want zk.State, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-events:
			if ev.Type == zk.EventSession && ev.State == want {
				return
			}
		case <-deadline:
			t.Fatalf("no %v session event within %v", want, timeout)
		}
	}
}

type zkTestLogger struct{ t *testing.T }

func (l zkTestLogger) Printf(format string, args ...any) {
	l.t.Logf(time.Now().Format("15:04:05.000")+" zk: "+format, args...)
}

func TestZooKeeperRuokClientAndRestart(t *testing.T) {
	start := time.Now()
	z := integration.StartZooKeeper(t)
	t.Logf("ZooKeeper container serving after %v at %v", time.Since(start).Round(time.Millisecond), z.Servers())
	z.RequireControl(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reply, err := z.FourLetterWord(ctx, "ruok")
	if err != nil || reply != "imok" {
		t.Fatalf("ruok = %q, %v; want imok", reply, err)
	}
	mode, err := integration.ServerMode(ctx, z.Servers()[0])
	if err != nil || mode != "standalone" {
		t.Fatalf("ServerMode = %q, %v; want standalone", mode, err)
	}

	conn, _ := connectZK(t, z.Servers(), 2*time.Second)
	if _, err := conn.Create("/harness", []byte("kept"), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create /harness: %v", err)
	}
	conn.Close()

	before := z.Servers()
	if err := z.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := integration.FourLetterWord(ctx, before[0], "ruok"); err == nil {
		t.Fatalf("ruok answered while the server is stopped")
	}
	start = time.Now()
	if err := z.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("ZooKeeper restarted and serving after %v", time.Since(start).Round(time.Millisecond))
	if !slices.Equal(before, z.Servers()) {
		t.Fatalf("servers changed across restart: %v -> %v", before, z.Servers())
	}
	conn2, _ := connectZK(t, z.Servers(), 2*time.Second)
	data, _, err := conn2.Get("/harness")
	if err != nil || string(data) != "kept" {
		t.Fatalf("after restart get /harness = %q, %v; want kept", data, err)
	}
}

func TestEnsembleSurvivesStoppedLeader(t *testing.T) {
	start := time.Now()
	e := integration.StartEnsemble(t, 3)
	t.Logf("3-node ensemble serving after %v at %v", time.Since(start).Round(time.Millisecond), e.Servers())
	e.RequireControl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	leader := -1
	for i := range e.Size() {
		mode, err := integration.ServerMode(ctx, e.Member(i).Servers()[0])
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		if mode == "leader" {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member reports Mode: leader")
	}

	conn, _ := connectZK(t, e.Servers(), 4*time.Second)
	if _, err := conn.Create("/before", nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create /before: %v", err)
	}
	if err := e.StopMember(ctx, leader); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The remaining two elect a leader; until then writes fail. The client
	// retries other servers on its own.
	err := testwait.Poll(ctx, func(context.Context) error {
		_, err := conn.Create("/after", []byte("x"), zk.FlagPersistent, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatalf("no write succeeded with member %d stopped: %v", leader, err)
	}
	t.Logf("a write succeeded %v after leader (member %d) stopped", time.Since(stopped).Round(time.Millisecond), leader)
	if ok, _, err := conn.Exists("/before"); err != nil || !ok {
		t.Fatalf("/before lost after leader stop: exists=%v err=%v", ok, err)
	}
	start = time.Now()
	if err := e.StartMember(ctx, leader); err != nil {
		t.Fatal(err)
	}
	t.Logf("member %d rejoined after %v", leader, time.Since(start).Round(time.Millisecond))
	// The restarted member has the write made while it was down.
	solo, _ := connectZK(t, e.Member(leader).Servers(), 4*time.Second)
	if _, err := solo.Sync("/after"); err != nil {
		t.Fatalf("sync on rejoined member: %v", err)
	}
	if ok, _, err := solo.Exists("/after"); err != nil || !ok {
		t.Fatalf("rejoined member lacks /after: exists=%v err=%v", ok, err)
	}
}

func TestPostgresRestartKeepsPortAndData(t *testing.T) {
	start := time.Now()
	p := integration.StartPostgres(t)
	t.Logf("Postgres container accepting connections after %v", time.Since(start).Round(time.Millisecond))
	p.RequireControl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dsn := p.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)

	before := p.DSN()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := pgx.Connect(ctx, dsn); err == nil {
		_ = c.Close(ctx)
		t.Fatal("connected while Postgres is stopped")
	}
	start = time.Now()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Postgres restarted after %v", time.Since(start).Round(time.Millisecond))
	if p.DSN() != before {
		t.Fatalf("DSN changed across restart: %s -> %s", before, p.DSN())
	}
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil || n != 100 {
		t.Fatalf("after restart count = %d, %v; want 100", n, err)
	}

	// A second database is isolated from the first.
	other, err := pgx.Connect(ctx, p.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	var exists bool
	if err := other.QueryRow(ctx, "SELECT to_regclass('items') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("fresh database sees table items: %v, %v", exists, err)
	}
}

// NewSchema's DSN puts a session in the fresh schema, which a second
// schema does not see; the schema is dropped at cleanup.
func TestPostgresNewSchema(t *testing.T) {
	p := integration.SharedPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var first string
	t.Run("first", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, p.NewSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&first); err != nil || !strings.HasPrefix(first, "t_") {
			t.Fatalf("current_schema() = %q, %v; want the test's fresh schema", first, err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE items (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		other, err := pgx.Connect(ctx, p.NewSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(ctx)
		var exists bool
		if err := other.QueryRow(ctx, "SELECT to_regclass('items') IS NOT NULL").Scan(&exists); err != nil || exists {
			t.Fatalf("a second schema sees table items: %v, %v", exists, err)
		}
	})
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", first).Scan(&left); err != nil || left {
		t.Fatalf("schema %s still there after its test: %v, %v", first, left, err)
	}
}

func TestProxyPartitionsZooKeeperClient(t *testing.T) {
	z := integration.SharedZooKeeper(t)
	p := integration.NewProxy(t, z.Servers()[0])
	_, events := connectZK(t, []string{p.Addr()}, 4*time.Second)
	p.Cut()
	awaitState(t, events, zk.StateDisconnected, 10*time.Second)
	p.Restore()
	awaitState(t, events, zk.StateHasSession, 10*time.Second)
}

func TestProcessSignals(t *testing.T) {
	start := time.Now()
	bin := integration.BuildBinary(t, "github.com/shardflow/shardflow/integration/internal/sigworker")
	t.Logf("built sigworker in %v", time.Since(start).Round(time.Millisecond))
	if again := integration.BuildBinary(t, "github.com/shardflow/shardflow/integration/internal/sigworker"); again != bin {
		t.Fatalf("second BuildBinary = %s, want cached %s", again, bin)
	}

	p := integration.StartProcess(t, bin, []string{"-every", "10ms"}, nil)
	p.RequireLine(t, `^ready pid=\d+$`, 30*time.Second)
	p.RequireLine(t, `^tick 2$`, 10*time.Second)

	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitProcState(t, p.Pid(), 'T')
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	n := len(p.Lines())
	p.RequireLine(t, `^tick \d+$`, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.WaitForLine(ctx, regexpLineAfter(p, n)); err != nil {
		t.Fatalf("no tick after Resume: %v", err)
	}

	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v (want exit 0 after SIGTERM)", err)
	}
	if !slices.Contains(p.Lines(), "terminating") || p.ExitCode() != 0 {
		t.Fatalf("after Stop: exit %d, lines %v", p.ExitCode(), p.Lines())
	}
	if data, err := os.ReadFile(p.OutputPath()); err != nil || !strings.Contains(string(data), "terminating") {
		t.Fatalf("output file: %v, %q", err, data)
	}

	k := integration.StartProcess(t, bin, nil, nil)
	k.RequireLine(t, `^ready`, 30*time.Second)
	if err := k.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(); err == nil || k.ExitCode() != -1 {
		t.Fatalf("after Kill: Wait = %v, exit %d; want killed by signal", err, k.ExitCode())
	}
	if _, err := k.WaitForLine(ctx, mustCompile(`^never$`)); !errors.Is(err, integration.ErrExited) {
		t.Fatalf("WaitForLine on an exited process = %v, want ErrExited", err)
	}
}

func TestEnvironmentServersAreNotControllable(t *testing.T) {
	t.Setenv("SHARDFLOW_ZK", "127.0.0.1:1, 127.0.0.1:2")
	t.Setenv("SHARDFLOW_PG", "postgres://u:p@127.0.0.1:1/db")
	z := integration.StartZooKeeper(t)
	if z.Controllable() || !slices.Equal(z.Servers(), []string{"127.0.0.1:1", "127.0.0.1:2"}) {
		t.Fatalf("StartZooKeeper with SHARDFLOW_ZK: controllable=%v servers=%v", z.Controllable(), z.Servers())
	}
	if err := z.Stop(context.Background()); !errors.Is(err, integration.ErrNotControllable) {
		t.Fatalf("Stop = %v, want ErrNotControllable", err)
	}
	if e := integration.StartEnsemble(t, 3); e.Controllable() || len(e.Servers()) != 2 {
		t.Fatalf("StartEnsemble with SHARDFLOW_ZK: controllable=%v servers=%v", e.Controllable(), e.Servers())
	}
	p := integration.StartPostgres(t)
	if p.Controllable() || p.DSN() != "postgres://u:p@127.0.0.1:1/db" {
		t.Fatalf("StartPostgres with SHARDFLOW_PG: controllable=%v dsn=%s", p.Controllable(), p.DSN())
	}
	t.Run("RequireControl skips", func(t *testing.T) {
		defer func() {
			if !t.Skipped() {
				t.Error("RequireControl did not skip")
			}
		}()
		z.RequireControl(t)
	})
}
