package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardflow/shardflow/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGoneAndReadPid(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	path := filepath.Join(t.TempDir(), "pid")
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ReadPid(t, 10*time.Second, path); got != pid {
		t.Fatalf("ReadPid = %d, want %d", got, pid)
	}
	if Gone(pid) {
		t.Fatal("a running process is gone")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: a zombie, which counts as gone.
	testwait.For(t, 10*time.Second, "the killed process to be a zombie", func() bool { return Gone(pid) })
	_ = cmd.Wait()
	if !Gone(pid) {
		t.Fatal("a killed and reaped process is not gone")
	}
}
