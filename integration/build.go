package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*buildResult
}

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// BuildBinary compiles the main package pkg (an import path or a path relative
// to the test's working directory, such as "./cmd/shardflow") once per test
// binary and returns the executable's path. It builds with -race when the test
// binary itself was built with -race. Concurrent calls for the same package
// wait for one build. The binaries live in a temporary directory removed by
// [Main]. It fails the test, with the compiler's output, when the build fails.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*buildResult{}
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "shardflow-bin-")
		if err != nil {
			builds.mu.Unlock()
			t.Fatalf("integration: binary cache directory: %v", err)
		}
		builds.dir = dir
	}
	r, ok := builds.bins[pkg]
	if !ok {
		name := strings.Trim(strings.NewReplacer("/", "_", ".", "_").Replace(pkg), "_")
		r = &buildResult{path: filepath.Join(builds.dir, fmt.Sprintf("%s-%d", name, len(builds.bins)))}
		builds.bins[pkg] = r
	}
	builds.mu.Unlock()

	r.once.Do(func() {
		args := []string{"build", "-o", r.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, pkg)
		cmd := exec.Command(goTool(), args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			r.err = fmt.Errorf("integration: go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

// goTool finds the go command: on PATH, else in GOROOT.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

func removeBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
		builds.dir = ""
		builds.bins = nil
	}
}
