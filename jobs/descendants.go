package jobs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"syscall"
)

// runIDEnv names the variable that marks every process of one script run:
// it is in the script's environment, so every descendant inherits it
// unless it replaces its whole environment.
const runIDEnv = "SHARDFLOW_RUN_ID"

// newRunID returns a random run id.
func newRunID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// killRun kills a script run's processes: its process group, and every
// process of this user whose environment carries the run's id: the
// descendants that left the group (setsid, a daemon's double fork) but
// kept the environment. Processes are found through /proc (Linux); where
// it is missing only the group is killed.
func killRun(pgid int, runID string) {
	killGroup(pgid)
	marker := []byte(runIDEnv + "=" + runID + "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or another user's
		}
		if bytes.HasPrefix(env, marker) || bytes.Contains(env, append([]byte{0}, marker...)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
