//go:build unix

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a program started by [StartProcess], in its own process group so
// that signals reach its children too. Its stdout and stderr go, interleaved,
// to a file and to an in-memory line log. Methods are safe for concurrent use.
type Process struct {
	cmd     *exec.Cmd
	outPath string
	done    chan struct{} // closed when the process has exited and its output is read
	waitErr error         // set before done is closed

	mu      sync.Mutex
	file    *os.File
	lines   []string
	partial []byte
	changed chan struct{} // closed and replaced whenever a line is added
}

// StartProcess starts bin with args; env entries ("K=V") are added to the
// test's environment. The process is killed (SIGKILL to its group) and waited
// for in t.Cleanup; if the test failed, the last 100 lines of its output are
// logged there, and a process still running is first sent SIGQUIT so that its
// goroutine dump (up to 3000 lines) shows where it was.
func StartProcess(t testing.TB, bin string, args []string, env []string) *Process {
	t.Helper()
	outPath := filepath.Join(t.TempDir(), filepath.Base(bin)+".out")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatalf("integration: create output file for %s: %v", bin, err)
	}
	p := &Process{outPath: outPath, done: make(chan struct{}), file: f, changed: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = output{p}
	cmd.Stderr = output{p}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("integration: start %s: %v", bin, err)
	}
	go func() { // owned by p: ends when the process exits; Cleanup waits for it.
		err := cmd.Wait()
		p.mu.Lock()
		p.flushPartial()
		_ = p.file.Close()
		p.mu.Unlock()
		p.waitErr = err
		close(p.done)
	}()
	t.Cleanup(func() {
		limit := 100
		if t.Failed() && p.dumpStacks() {
			limit = 3000 // the goroutine dump is what explains a hang
		}
		_ = p.Kill()
		if t.Failed() {
			lines := p.Lines()
			if len(lines) > limit {
				lines = lines[len(lines)-limit:]
			}
			t.Logf("output of %s %s (last %d lines, all in %s):\n%s", filepath.Base(bin), strings.Join(args, " "), len(lines), outPath, strings.Join(lines, "\n"))
		}
	})
	return p
}

// output is the io.Writer of a Process's stdout and stderr: it keeps the
// output file and the lines WaitForLine and Lines read.
type output struct{ p *Process }

// Write records b, a chunk of the process's output.
func (o output) Write(b []byte) (int, error) {
	p := o.p
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.file.Write(b)
	p.partial = append(p.partial, b...)
	added := false
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.lines = append(p.lines, string(p.partial[:i]))
		p.partial = p.partial[i+1:]
		added = true
	}
	if added {
		close(p.changed)
		p.changed = make(chan struct{})
	}
	return len(b), nil
}

func (p *Process) flushPartial() {
	if len(p.partial) > 0 {
		p.lines = append(p.lines, string(p.partial))
		p.partial = nil
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// OutputPath returns the file holding the process's output.
func (p *Process) OutputPath() string { return p.outPath }

// Lines returns the complete output lines so far.
func (p *Process) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// ErrExited is returned by WaitForLine when the process exits before printing
// a matching line.
var ErrExited = errors.New("integration: process exited")

// WaitForLine blocks until an output line matches re and returns it, searching
// lines already printed first. It returns ctx's error when ctx ends, or
// [ErrExited] when the process exits without such a line.
func (p *Process) WaitForLine(ctx context.Context, re *regexp.Regexp) (string, error) {
	next := 0
	for {
		p.mu.Lock()
		for ; next < len(p.lines); next++ {
			if re.MatchString(p.lines[next]) {
				line := p.lines[next]
				p.mu.Unlock()
				return line, nil
			}
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-p.done:
			// Lines written before exit were flushed before done closed.
			if p.hasMatchFrom(next, re) {
				continue
			}
			return "", fmt.Errorf("%w (%v) before printing a line matching %q", ErrExited, p.waitErr, re)
		case <-ctx.Done():
			return "", fmt.Errorf("integration: no output line matching %q: %w", re, ctx.Err())
		}
	}
}

func (p *Process) hasMatchFrom(next int, re *regexp.Regexp) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ; next < len(p.lines); next++ {
		if re.MatchString(p.lines[next]) {
			return true
		}
	}
	return false
}

// RequireLine is WaitForLine with a timeout that fails the test when no line
// matches pattern in time.
func (p *Process) RequireLine(t testing.TB, pattern string, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	line, err := p.WaitForLine(ctx, regexp.MustCompile(pattern))
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// dumpStacks asks a process still running when its test failed (it may be
// the one that hung) for every goroutine's stack: Go programs print them
// on SIGQUIT and exit. It waits for the exit, at most quitWait, and reports
// whether the process was running.
func (p *Process) dumpStacks() bool {
	select {
	case <-p.done:
		return false
	default:
	}
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGQUIT); err != nil {
		return false
	}
	select {
	case <-p.done:
	case <-time.After(quitWait):
	}
	return true
}

// quitWait bounds the wait for a goroutine dump after SIGQUIT.
const quitWait = 10 * time.Second

func (p *Process) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("integration: signal %v to process group %d: %w", sig, p.cmd.Process.Pid, err)
	}
	return nil
}

// Kill sends SIGKILL to the process group, a crash, and waits until the
// process has exited. Killing an exited process is a no-op.
func (p *Process) Kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Stop sends SIGTERM (and SIGCONT, in case it is paused) to the process group
// and waits until the process exits, returning its exit error (nil for exit
// status 0). If ctx ends first it kills the process and returns ctx's error.
func (p *Process) Stop(ctx context.Context) error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	select {
	case <-p.done:
		return p.waitErr
	case <-ctx.Done():
		_ = p.Kill()
		return fmt.Errorf("integration: process %d did not exit after SIGTERM, killed: %w", p.Pid(), ctx.Err())
	}
}

// Pause stops the process group with SIGSTOP: the process keeps its
// connections but answers nothing, so its ZooKeeper session expires after the
// session timeout.
func (p *Process) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process group with SIGCONT.
func (p *Process) Resume() error { return p.signal(syscall.SIGCONT) }

// Wait blocks until the process exits and returns its exit error (nil for
// exit status 0, an *exec.ExitError otherwise). Use Done to wait with a
// deadline.
func (p *Process) Wait() error {
	<-p.done
	return p.waitErr
}

// Done returns a channel closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode returns the exit code, -1 when killed by a signal or still running.
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}
