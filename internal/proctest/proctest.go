// Package proctest holds the tests' checks on operating-system processes
// (a script job's process group, a worker killed by a fault test): whether
// a process is gone, and the pid a script wrote to a file.
package proctest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardflow/shardflow/internal/testwait"
)

// Gone reports whether pid no longer runs: there is no such process, or it
// is a zombie nobody has reaped yet (in a container the reaper may be slow
// or absent).
func Gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) STATE ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// ReadPid waits up to timeout for the file at path to hold a pid (one
// decimal number, as `echo $! > path` writes it) and returns it.
func ReadPid(t testwait.TB, timeout time.Duration, path string) int {
	t.Helper()
	var pid int
	testwait.ForNoError(t, timeout, "a pid in "+filepath.Base(path), func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return pid
}
