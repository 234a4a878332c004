package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// Environment variables read by the harness; see the package documentation.
const (
	envZooKeeper     = "SHARDFLOW_ZK"
	envPostgres      = "SHARDFLOW_PG"
	envZooKeeperImg  = "SHARDFLOW_ZK_IMAGE"
	envPostgresImg   = "SHARDFLOW_PG_IMAGE"
	envRequireDocker = "SHARDFLOW_REQUIRE_DOCKER"
)

// Default images, the official ones; override with SHARDFLOW_ZK_IMAGE and
// SHARDFLOW_PG_IMAGE.
const (
	defaultZooKeeperImage = "zookeeper:3.9"
	defaultPostgresImage  = "postgres:16"
)

// containerLabel is set (to "true") on every container and network the
// harness creates.
const containerLabel = "org.shardflow.integration"

// ErrNotControllable is returned by Stop and Start of a server named by the
// environment (SHARDFLOW_ZK, SHARDFLOW_PG): the harness does not own it.
var ErrNotControllable = errors.New("integration: server named by the environment is not controllable: unset SHARDFLOW_ZK/SHARDFLOW_PG to let the harness start containers")

// startTimeout bounds how long a server may take to serve after its container
// starts. A JVM on a loaded 2-core machine needs a few seconds.
const startTimeout = 90 * time.Second

var docker struct {
	once sync.Once
	err  error
}

// dockerUsable reports whether a Docker engine answers, probing once per
// process.
func dockerUsable() error {
	docker.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			docker.err = err
			return
		}
		defer cli.Close()
		_, docker.err = cli.Ping(ctx, client.PingOptions{})
	})
	return docker.err
}

// requireDocker skips the test when no Docker engine answers, or fails it when
// SHARDFLOW_REQUIRE_DOCKER is set. what names the server and envVar the
// variable that would name an existing one instead.
func requireDocker(t testing.TB, what, envVar string) {
	t.Helper()
	err := dockerUsable()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("integration: %s needs a Docker engine, which does not answer (%v): start Docker, or set %s to an existing server", what, err, envVar)
	if os.Getenv(envRequireDocker) != "" {
		t.Fatal(msg + " (SHARDFLOW_REQUIRE_DOCKER is set, so this is not skipped)")
	}
	t.Skip(msg)
}

// checkImage fails early, with the fix, when a local-only image is missing:
// pulling it cannot work.
func checkImage(ctx context.Context, image, envVar string) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("integration: docker client: %w", err)
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, image); err == nil {
		return nil
	}
	if strings.HasPrefix(image, "shardflow-local/") {
		return fmt.Errorf("integration: image %s is not built: run `make images` (scripts/build-images.sh), or set %s to an existing server", image, envVar)
	}
	return nil // testcontainers pulls it.
}

// imageHint explains a failed container start where pulling is the likely
// cause.
func imageHint(image, imageVar, envVar string) string {
	return fmt.Sprintf("if there is no registry, run `make images` and set %s=%s, or set %s to an existing server",
		imageVar, localImage(imageVar), envVar)
}

func localImage(imageVar string) string {
	if imageVar == envPostgresImg {
		return "shardflow-local/postgres:15"
	}
	return "shardflow-local/zookeeper:3.8"
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// container binds it as its fixed host port, so a restart keeps the address.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("integration: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func hostPort(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// containerLogger sends testcontainers' own messages to the test's log, or
// nowhere for shared containers that outlive the test that started them.
func containerLogger(t testing.TB, shared bool) testcontainers.LoggerOption {
	if shared {
		return testcontainers.WithLogger(tclog.NewNoopLogger())
	}
	return testcontainers.WithLogger(tclog.TestLogger(t))
}

// isPortConflict reports a lost race for a port chosen by freePort.
func isPortConflict(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "port is already allocated") || strings.Contains(s, "address already in use")
}
