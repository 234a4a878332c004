package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/shardflow/shardflow/internal/testwait"
	"github.com/testcontainers/testcontainers-go"
)

// Credentials of the Postgres containers the harness starts.
const (
	postgresUser     = "shardflow"
	postgresPassword = "shardflow"
	postgresDB       = "shardflow"
)

// Postgres is one Postgres server: a container owned by the test, or the
// server named by SHARDFLOW_PG. Methods are safe for concurrent use.
type Postgres struct {
	dsn string
	restartable
}

// StartPostgres starts a Postgres server in a container (fsync off: data
// survives a container restart, not a host crash) and returns once it accepts
// connections; the container is removed in t.Cleanup. When SHARDFLOW_PG is set
// it starts nothing and returns that server, not controllable. Docker missing
// skips the test unless SHARDFLOW_REQUIRE_DOCKER is set.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	if p := pgFromEnv(); p != nil {
		return p
	}
	requireDocker(t, "Postgres", envPostgres)
	p, err := startPGContainer(t, envOr(envPostgresImg, defaultPostgresImage), false)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pgFromEnv() *Postgres {
	if v := os.Getenv(envPostgres); v != "" {
		return &Postgres{dsn: v, restartable: restartable{running: true}}
	}
	return nil
}

func startPGContainer(t testing.TB, image string, shared bool) (*Postgres, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := checkImage(ctx, image, envPostgres); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		ctr, err := testcontainers.Run(ctx, image,
			containerLogger(t, shared),
			testcontainers.WithEnv(map[string]string{
				"POSTGRES_USER":     postgresUser,
				"POSTGRES_PASSWORD": postgresPassword,
				"POSTGRES_DB":       postgresDB,
			}),
			// max_connections: make sim STORE=pg runs 10 schedules at once
			// of up to 8 servers, each a pgstore with a listening connection
			// and a pool of 2, beside an admin session: up to about 270
			// (200 refused "too many clients" in 2 of 20 replays of a
			// 6-server seed, REPEAT=20).
			testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=400"),
			testcontainers.WithExposedPorts("5432/tcp"),
			testcontainers.WithLabels(map[string]string{containerLabel: "true"}),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = network.PortMap{
					network.MustParsePort("5432/tcp"): {{HostIP: netipLoopback, HostPort: fmt.Sprint(port)}},
				}
			}),
		)
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
			return nil, fmt.Errorf("integration: start Postgres container from %s: %w (%s)", image, err, imageHint(image, envPostgresImg, envPostgres))
		}
		p := &Postgres{
			dsn:         fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", postgresUser, postgresPassword, hostPort(port), postgresDB),
			restartable: restartable{ctr: ctr, running: true},
		}
		if err := waitPostgres(ctx, p.dsn); err != nil {
			if shared {
				_ = testcontainers.TerminateContainer(ctr)
			}
			return nil, fmt.Errorf("integration: Postgres container at %s did not accept connections: %w\n%s", hostPort(port), err, containerLogs(ctr))
		}
		return p, nil
	}
	return nil, fmt.Errorf("integration: start Postgres container: no free host port after 3 tries: %w", lastErr)
}

func waitPostgres(ctx context.Context, dsn string) error {
	return testwait.Poll(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		conn, err := pgx.Connect(cctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(cctx)
		return conn.Ping(cctx)
	})
}

// DSN returns a connection string (URL form) for the server's main database,
// reachable from the host; for a container it stays the same across Stop and
// Start.
func (p *Postgres) DSN() string { return p.dsn }

// Controllable reports whether the harness owns the server, so that Stop and
// Start work. It is false for a server named by SHARDFLOW_PG.
func (p *Postgres) Controllable() bool { return p.ctr != nil }

// RequireControl skips the test, saying why, when the server is not
// controllable.
func (p *Postgres) RequireControl(t testing.TB) {
	t.Helper()
	if !p.Controllable() {
		t.Skipf("integration: this test stops Postgres, but the server comes from %s; unset it to run against a container", envPostgres)
	}
}

// Stop stops the server (a fast shutdown: open sessions are ended) and keeps
// its data. It blocks until the container has exited or ctx ends. Stopping a
// stopped server is a no-op; a server named by SHARDFLOW_PG returns
// [ErrNotControllable].
func (p *Postgres) Stop(ctx context.Context) error { return p.stop(ctx, "Postgres") }

// Start starts a stopped server again, with its data and on the same host
// port, and blocks until it accepts connections or ctx ends. Starting a
// running server is a no-op.
func (p *Postgres) Start(ctx context.Context) error {
	return p.start(ctx, "Postgres", func(ctx context.Context) error { return waitPostgres(ctx, p.dsn) })
}

var dbSeq atomic.Int64

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates a fresh, empty database for this test and returns its
// DSN; it is dropped (with FORCE, ending open sessions) in t.Cleanup. Tests
// that each use their own database may run in parallel on one server. The
// role needs CREATEDB when the server comes from SHARDFLOW_PG.
func (p *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	name := p.createForTest(t, "DATABASE", " WITH (FORCE)") // FORCE ends open sessions
	u, err := url.Parse(p.dsn)
	if err != nil || u.Scheme == "" {
		// A key=value DSN: a later dbname wins.
		return p.dsn + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

// NewSchema creates a fresh, empty schema for this test and returns a DSN
// of the server's database whose sessions have it as their search_path;
// it is dropped (CASCADE) in t.Cleanup, so close the test's pools in a
// cleanup registered after this call. Cheaper than NewDatabase; tests on
// their own schemas may run in parallel.
func (p *Postgres) NewSchema(t testing.TB) string {
	t.Helper()
	name := p.createForTest(t, "SCHEMA", " CASCADE")
	u, err := url.Parse(p.dsn)
	if err != nil || u.Scheme == "" {
		// A key=value DSN: an unknown key is a session parameter.
		return p.dsn + " search_path=" + name
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// createForTest creates a fresh object of kind (DATABASE, SCHEMA) for t
// and drops it, with dropOptions, in t.Cleanup. It returns its name.
func (p *Postgres) createForTest(t testing.TB, kind, dropOptions string) string {
	t.Helper()
	name := testIdent(t)
	what := strings.ToLower(kind) + " " + name
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.exec(ctx, "CREATE "+kind+" "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("integration: create %s: %v", what, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.exec(ctx, "DROP "+kind+" IF EXISTS "+pgx.Identifier{name}.Sanitize()+dropOptions); err != nil {
			t.Errorf("integration: drop %s: %v", what, err)
		}
	})
	return name
}

// testIdent is a fresh lower-case SQL identifier for a database or schema
// of t: its name (shortened), the process id and a sequence number.
func testIdent(t testing.TB) string {
	name := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t_%s_%d_%d", name, os.Getpid(), dbSeq.Add(1))
}

func (p *Postgres) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, p.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}
