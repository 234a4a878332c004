package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/shardflow/shardflow/internal/redact"
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

// ScriptOptions are how RunScript runs a command besides its argv.
type ScriptOptions struct {
	// Path is the program to run, when the caller resolved it
	// (AllowList.ResolveCommand: the real path it checked); argv[0] stays
	// the program's name. Default: argv[0] looked up in PATH.
	Path string
	// Env names the variables of this process a script gets besides
	// BaseScriptEnv and the run context (ShardContext.Env): the worker's
	// --script-env. Names starting with SHARDFLOW_ are passed only when
	// they start with SecretEnvPrefix (CheckScriptEnv refuses the others).
	Env []string
	// Logger receives the output tail. Default slog.Default().
	Logger *slog.Logger
}

// BaseScriptEnv names the variables of this process every script gets
// (when set): what programs need to run at all, no credentials.
var BaseScriptEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// CheckScriptEnv refuses --script-env names that are empty, hold '=', or
// name a shardflow setting: a script never gets the worker's credentials
// (SHARDFLOW_ZK_AUTH, SHARDFLOW_CONSOLE_TOKEN, ...); SHARDFLOW_SECRET_*
// variables are for jobs and may be named.
func CheckScriptEnv(names []string) error {
	for _, n := range names {
		switch {
		case n == "" || strings.ContainsAny(n, "= \t\n\x00"):
			return fmt.Errorf("jobs: --script-env %q is not a variable name", n)
		case strings.HasPrefix(n, "SHARDFLOW_") && !strings.HasPrefix(n, SecretEnvPrefix):
			return fmt.Errorf("jobs: --script-env %s: a script never gets the worker's own SHARDFLOW_* settings (credentials among them); "+
				"export what the script needs under another name, or as %s*", n, SecretEnvPrefix)
		}
	}
	return nil
}

// scriptEnv is the whole environment of a script: the allowed variables
// of this process that are set, then the run context. It returns the
// values of the SecretEnvPrefix variables too, for redacting the output.
func scriptEnv(extra []string, c ShardContext) (env, secretValues []string) {
	for _, name := range append(append([]string(nil), BaseScriptEnv...), extra...) {
		if strings.HasPrefix(name, "SHARDFLOW_") && !strings.HasPrefix(name, SecretEnvPrefix) {
			continue // CheckScriptEnv refuses it; never passed
		}
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
			if strings.HasPrefix(name, SecretEnvPrefix) {
				secretValues = append(secretValues, v)
			}
		}
	}
	return append(env, c.Env()...), secretValues
}

// RunScript runs argv once for one shard item and returns nil when it
// exits with status 0. The command runs without a shell (argv[0] is looked
// up in PATH when it has no slash), in its own process group, with stdin
// from /dev/null, a minimal environment (BaseScriptEnv, the variables
// opts.Env names, and c.Env(): never this process's credentials), and c as
// JSON appended as its last argument. The output tail in the log and the
// error is redacted (package redact: URL secrets, password=..., the
// SHARDFLOW_SECRET_* values it was given).
//
// When ctx ends (ownership lost, stop, itemTimeout) the run's processes
// are killed with SIGKILL: its process group, so children and
// grandchildren go too, and every process whose environment carries the
// run's SHARDFLOW_RUN_ID (found through /proc), so descendants that left
// the group (setsid, a daemon's double fork) go as well. The same happens
// when the command exits, so nothing it left in the background outlives
// its run. What escapes: a descendant that left the group and replaced
// its whole environment (env -i), and everything when the worker itself
// dies by SIGKILL (only the command's own process is then killed, by
// Pdeathsig). The combined stdout and stderr's last 2 KiB
// are logged at info level and, on failure, included in the error
// (wrapping ErrScriptFailed, or ctx's cause when ctx ended).
func RunScript(ctx context.Context, argv []string, c ShardContext, opts ScriptOptions) error {
	if len(argv) == 0 {
		return fmt.Errorf("%w: empty command line", ErrScriptFailed)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("jobs: script %s: output pipe: %w", argv[0], err)
	}
	args := append(append([]string(nil), argv[1:]...), string(c.JSON()))
	cmd := exec.Command(argv[0], args...)
	if opts.Path != "" {
		cmd.Path, cmd.Err = opts.Path, nil
	}
	env, secretValues := scriptEnv(opts.Env, c)
	runID := newRunID()
	cmd.Env = append(env, runIDEnv+"="+runID)
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
	stopKill := context.AfterFunc(ctx, func() { killRun(pgid, runID) })
	werr := cmd.Wait()
	stopKill()
	killRun(pgid, runID) // whatever the command left running, in its group or not
	select {
	case <-copied:
	case <-time.After(pipeDrainTimeout):
		// A process outside the group keeps the pipe open: stop reading.
	}
	_ = r.Close()
	<-copied

	text := redact.Text(out.String(), secretValues...)
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
