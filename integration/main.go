package integration

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	"go.uber.org/goleak"
)

var shared struct {
	zkOnce sync.Once
	zk     *ZooKeeper
	zkErr  error

	pgOnce sync.Once
	pg     *Postgres
	pgErr  error
}

// SharedZooKeeper returns one ZooKeeper server shared by every test of the
// test binary that calls it, started on first use (or the server named by
// SHARDFLOW_ZK). It is for suites that only need a server: tests must use
// their own paths and must not stop it (it is not controllable by design;
// fault tests use [StartZooKeeper]). [Main] removes it, so a package using it
// must call Main from TestMain.
func SharedZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	if z := zkFromEnv(); z != nil {
		return z
	}
	requireDocker(t, "ZooKeeper", envZooKeeper)
	shared.zkOnce.Do(func() {
		z, err := startZKContainer(t, newZKConfig(nil), true, nil, 1, "")
		if err != nil {
			shared.zkErr = err
			return
		}
		shared.zk = z
	})
	if shared.zkErr != nil {
		t.Fatal(shared.zkErr)
	}
	// The shared server is not controllable: one test stopping it would break
	// the others.
	return &ZooKeeper{servers: shared.zk.Servers(), restartable: restartable{running: true}}
}

// SharedPostgres returns one Postgres server shared by every test of the test
// binary that calls it, started on first use (or the server named by
// SHARDFLOW_PG); tests isolate themselves with [Postgres.NewDatabase]. It is
// not controllable. [Main] removes it.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	if p := pgFromEnv(); p != nil {
		return p
	}
	requireDocker(t, "Postgres", envPostgres)
	shared.pgOnce.Do(func() {
		p, err := startPGContainer(t, envOr(envPostgresImg, defaultPostgresImage), true)
		if err != nil {
			shared.pgErr = err
			return
		}
		shared.pg = p
	})
	if shared.pgErr != nil {
		t.Fatal(shared.pgErr)
	}
	return &Postgres{dsn: shared.pg.DSN(), restartable: restartable{running: true}}
}

// DefaultParallel sets this test binary's -parallel to n, unless its command
// line set -parallel itself. go test's default is GOMAXPROCS, right for
// tests that compute; fault tests spend their time waiting for session
// timeouts, restarts and cron ticks of processes and containers of their
// own, so more of them can wait at once than there are CPUs. Call it in
// TestMain before [Main]:
//
//	func TestMain(m *testing.M) { integration.DefaultParallel(4); integration.Main(m) }
func DefaultParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(fmt.Sprintf("integration.DefaultParallel(%d): %v", n, err))
		}
	}
}

// Main runs the package's tests for TestMain, then removes the shared
// containers and built binaries, then fails the run if goroutines leaked
// (goleak; opts add ignores), and exits:
//
//	func TestMain(m *testing.M) { integration.Main(m) }
//
// It never returns.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	cleanupShared()
	if code == 0 {
		if err := goleak.Find(append(defaultLeakIgnores(), opts...)...); err != nil {
			fmt.Fprintf(os.Stderr, "integration.Main: goroutines leaked after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func cleanupShared() {
	if shared.zk != nil {
		if err := testcontainers.TerminateContainer(shared.zk.ctr); err != nil {
			fmt.Fprintf(os.Stderr, "integration.Main: remove the shared ZooKeeper container: %v\n", err)
		}
		shared.zk = nil
	}
	if shared.pg != nil {
		if err := testcontainers.TerminateContainer(shared.pg.ctr); err != nil {
			fmt.Fprintf(os.Stderr, "integration.Main: remove the shared Postgres container: %v\n", err)
		}
		shared.pg = nil
	}
	removeBuilds()
}

// defaultLeakIgnores are goroutines of libraries the harness uses that
// outlive their users by design (idle HTTP keep-alive connections of the
// Docker client).
func defaultLeakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	}
}
