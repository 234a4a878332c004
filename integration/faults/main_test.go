package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bin.dir != "" {
		_ = os.RemoveAll(bin.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "faults: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var bin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// workerBinary builds integration/testworker once per test binary and
// returns its path. The worker is built without the race detector unless
// SHARDFLOW_WORKER_RACE is set: four instrumented workers on a 2-core
// machine stretch scheduling enough to blur the timing bounds under test.
func workerBinary(t testing.TB) string {
	t.Helper()
	bin.once.Do(func() {
		bin.dir, bin.err = os.MkdirTemp("", "shardflow-testworker-")
		if bin.err != nil {
			return
		}
		bin.path = filepath.Join(bin.dir, "testworker")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		args := []string{"build", "-o", bin.path}
		if os.Getenv("SHARDFLOW_WORKER_RACE") != "" {
			args = append(args, "-race")
		}
		args = append(args, "github.com/shardflow/shardflow/integration/testworker")
		out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
		if err != nil {
			bin.err = fmt.Errorf("go build testworker: %w\n%s", err, out)
		}
	})
	if bin.err != nil {
		t.Fatalf("faults: %v", bin.err)
	}
	return bin.path
}
