package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Output kept per script run for the log and the error.
const scriptTailBytes = 2048

// pipeDrainTimeout bounds the wait for a script's output pipe to close
// after its process group was killed: only a process that left the group
// (setsid) can still hold it.
const pipeDrainTimeout = 2 * time.Second

// ErrScriptFailed: a SCRIPT job's command exited with a non-zero status or
// was killed. The error's text carries the status and the output's tail.
var ErrScriptFailed = errors.New("jobs: script failed")

// RunScript runs argv once for one shard item and returns nil when it
// exits with status 0. The command runs without a shell (argv[0] is looked
// up in PATH when it has no slash), in its own process group, with stdin
// from /dev/null, the environment of this process plus c.Env(), and c as
// JSON appended as its last argument.
//
// When ctx ends (ownership lost, stop, itemTimeout) the whole process
// group is killed with SIGKILL, so children and grandchildren go too; the
// group is also killed when the command exits, so nothing it left in the
// background outlives its run. The combined stdout and stderr's last 2 KiB
// are logged at info level and, on failure, included in the error
// (wrapping ErrScriptFailed, or ctx's cause when ctx ended).
func RunScript(ctx context.Context, argv []string, c ShardContext, logger *slog.Logger) error {
	if len(argv) == 0 {
		return fmt.Errorf("%w: empty command line", ErrScriptFailed)
	}
	if logger == nil {
		logger = slog.Default()
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("jobs: script %s: output pipe: %w", argv[0], err)
	}
	args := append(append([]string(nil), argv[1:]...), string(c.JSON()))
	cmd := exec.Command(argv[0], args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	cmd.Stdout, cmd.Stderr = w, w // an *os.File: the child writes it directly
	// Its own group, so one kill reaches its children; Pdeathsig kills the
	// direct process if this worker dies without killing the group (a
	// crash, SIGKILL): its own children are then left to run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = w.Close() // the children hold their copies
	if err != nil {
		_ = r.Close()
		return fmt.Errorf("%w: %s: start: %w", ErrScriptFailed, argv[0], err)
	}
	pgid := cmd.Process.Pid // Setpgid: the group id is the leader's pid
	out := newTail(scriptTailBytes)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, r)
	}()
	stopKill := context.AfterFunc(ctx, func() { killGroup(pgid) })
	werr := cmd.Wait()
	stopKill()
	killGroup(pgid) // whatever the command left running in its group
	select {
	case <-copied:
	case <-time.After(pipeDrainTimeout):
		// A process outside the group keeps the pipe open: stop reading.
	}
	_ = r.Close()
	<-copied

	text := out.String()
	attrs := []any{"job", c.JobName, "item", c.ShardingItem, "command", argv[0]}
	if werr == nil && ctx.Err() == nil {
		if text != "" {
			logger.Info("jobs: script finished", append(attrs, "output", text)...)
		}
		return nil
	}
	status := describeExit(werr)
	logger.Warn("jobs: script failed", append(attrs, "status", status, "output", text)...)
	if ctx.Err() != nil {
		return fmt.Errorf("jobs: script %s %s (process group killed): %w; output tail: %q", argv[0], status, context.Cause(ctx), text)
	}
	return fmt.Errorf("%w: %s %s; output tail: %q", ErrScriptFailed, argv[0], status, text)
}

// killGroup sends SIGKILL to process group pgid; a group already gone is
// fine.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func describeExit(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exited with status 0"
}
