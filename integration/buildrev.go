package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BuildBinaryAt compiles the main package pkg (a path relative to the
// repository root, such as "./examples/pgbatch") as it was at git revision
// rev of the repository holding the test's working directory, once per
// test binary, and returns the executable's path and the full commit id:
// the worker of an earlier version, for mixed-version fleets. The source is
// taken with `git archive` (the repository and its work trees are left as
// they are) and built with GOWORK=off (an earlier version builds against
// its own go.mod), with -race when the test binary has it, as BuildBinary
// (the dependencies' race builds are then mostly in the build cache; the
// go-zookeeper race make test's workspace fixes is reachable only when a
// connection drops with watches set, so keep faults away from this worker
// in race builds). It skips the test
// in a shallow clone, which lacks the history, and fails it when rev is
// unknown or the build fails.
func BuildBinaryAt(t testing.TB, rev, pkg string) (path, commit string) {
	t.Helper()
	if out, err := exec.Command("git", "rev-parse", "--is-shallow-repository").Output(); err == nil && strings.TrimSpace(string(out)) == "true" {
		t.Skipf("integration: a shallow clone has no revision %s to build; fetch the history (git fetch --unshallow)", rev)
	}
	out, err := exec.Command("git", "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		t.Fatalf("integration: git revision %q is not in this repository: %v", rev, err)
	}
	commit = strings.TrimSpace(string(out))
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
	key := commit + "@" + pkg
	r, ok := builds.bins[key]
	if !ok {
		name := strings.Trim(strings.NewReplacer("/", "_", ".", "_").Replace(pkg), "_")
		r = &buildResult{path: filepath.Join(builds.dir, fmt.Sprintf("%s-%.12s-%d", name, commit, len(builds.bins)))}
		builds.bins[key] = r
	}
	dir := builds.dir
	builds.mu.Unlock()

	r.once.Do(func() { r.err = buildAt(dir, commit, pkg, r.path) })
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path, commit
}

// buildAt extracts commit's tree into a directory under dir and builds pkg
// there into out.
func buildAt(dir, commit, pkg, out string) error {
	src, err := os.MkdirTemp(dir, "src-"+commit[:12]+"-")
	if err != nil {
		return fmt.Errorf("integration: source directory for %s: %w", commit, err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return fmt.Errorf("integration: finding the repository root: %w", err)
	}
	tarball := src + ".tar"
	// From the root: in a subdirectory git archive takes only that subtree.
	if b, err := exec.Command("git", "-C", strings.TrimSpace(string(top)), "archive", "--format=tar", "-o", tarball, commit).CombinedOutput(); err != nil {
		return fmt.Errorf("integration: git archive %s: %w\n%s", commit, err, b)
	}
	if b, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		return fmt.Errorf("integration: extracting %s: %w\n%s", commit, err, b)
	}
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool(), append(args, pkg)...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("integration: go build %s at %s: %w\n%s", pkg, commit, err, b)
	}
	return nil
}
