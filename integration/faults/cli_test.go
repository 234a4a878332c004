package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/integration"
)

// cli runs the shardflow CLI binary against the cluster's ZooKeeper and
// namespace and returns its stdout, failing the test on a non-zero exit.
// verbArgs are the command and its arguments before the connection flags;
// tail follows them (config set's FIELD VALUE).
func (c *cluster) cli(bin string, verbArgs []string, flags []string, tail ...string) string {
	c.t.Helper()
	args := append(slices.Clone(verbArgs), "--zk", strings.Join(c.zk, ","), "--namespace", c.namespace)
	args = append(append(args, flags...), tail...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("faults: shardflow %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// beganSince returns the begins by server strictly after since.
func beganSince(evs []Event, server string, since time.Time) []Event {
	return filter(evs, func(e Event) bool { return e.Ev == "begin" && e.Server == server && e.T > since.UnixMilli() })
}

// TestCLI: the CLI against ZooKeeper: `shardflow status --json` prints one
// JSON document whose servers and items match Admin.Status; trigger, pause,
// resume, disable --server and config set ... cron take effect on the
// workers, as seen in their events and in status.
func TestCLI(t *testing.T) {
	t.Parallel()
	zk := integration.StartZooKeeper(t)
	cliBin := integration.BuildBinary(t, "github.com/shardflow/shardflow/cmd/shardflow")
	// No cron: the workers run only when triggered, so every run below is
	// caused by the command under test.
	c := newCluster(t, zk.Servers(), 6, "--cron", "")
	for _, id := range []string{"w1", "w2", "w3"} {
		c.start(id)
	}
	job := []string{"--job", c.job}

	// trigger: every live server runs now.
	at := time.Now()
	c.cli(cliBin, []string{"trigger"}, job)
	c.log.waitFor(t, settle, "every item begun after `trigger`", allBegunSince(at, c.total))
	c.requireOwnership(settle, "w1", "w2", "w3")

	// status --json matches Admin.Status.
	out := c.cli(cliBin, []string{"status"}, append(job, "--json"))
	var doc struct {
		Namespace string            `json:"namespace"`
		Jobs      []coord.JobStatus `json:"jobs"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("status --json printed no JSON document: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("status --json printed more than one JSON document:\n%s", out)
	}
	want := c.status(10 * time.Second)
	if len(doc.Jobs) != 1 || doc.Namespace != c.namespace {
		t.Fatalf("status --json: namespace %q with %d jobs, want %q with 1:\n%s", doc.Namespace, len(doc.Jobs), c.namespace, out)
	}
	if got, wantS := serverSummary(doc.Jobs[0]), serverSummary(want); got != wantS {
		t.Errorf("status --json servers %s, Admin.Status %s", got, wantS)
	}
	if got, wantI := itemSummary(doc.Jobs[0]), itemSummary(want); got != wantI {
		t.Errorf("status --json items %s, Admin.Status %s", got, wantI)
	}

	// pause --server w1: w1 stops running, the others go on.
	c.cli(cliBin, []string{"pause"}, append(job, "--server", "w1"))
	c.awaitStatus(settle, "w1 paused in status", func(st coord.JobStatus) error {
		return serverFlag(st, "w1", func(s coord.ServerStatus) bool { return s.Paused })
	})
	paused := time.Now()
	c.cli(cliBin, []string{"trigger"}, job)
	c.log.waitFor(t, settle, "w2 and w3 run after the trigger", func(evs []Event) bool {
		return len(beganSince(evs, "w2", paused)) > 0 && len(beganSince(evs, "w3", paused)) > 0
	})
	if b := beganSince(c.log.all(), "w1", paused); len(b) > 0 {
		t.Errorf("paused w1 began %d items after `pause`, first: %s", len(b), b[0])
	}

	// resume: w1 runs again at the next trigger.
	c.cli(cliBin, []string{"resume"}, append(job, "--server", "w1"))
	c.awaitStatus(settle, "w1 resumed in status", func(st coord.JobStatus) error {
		return serverFlag(st, "w1", func(s coord.ServerStatus) bool { return !s.Paused })
	})
	resumed := time.Now()
	c.cli(cliBin, []string{"trigger"}, job)
	c.log.waitFor(t, settle, "w1 runs after `resume` and a trigger", func(evs []Event) bool { return len(beganSince(evs, "w1", resumed)) > 0 })

	// disable --server w2: w2 leaves the sharding, the others own every item.
	c.cli(cliBin, []string{"disable"}, append(job, "--server", "w2"))
	disabled := time.Now()
	c.cli(cliBin, []string{"trigger"}, job)
	c.awaitStatus(settle, "w2 disabled and owning nothing", func(st coord.JobStatus) error {
		if err := serverFlag(st, "w2", func(s coord.ServerStatus) bool { return s.Disabled && len(s.Sharding) == 0 }); err != nil {
			return err
		}
		return checkDisjointOwnership(st, c.total)
	})
	// Resharding is lazy (at a run): trigger until one run after it covers
	// every item with w1 and w3 alone.
	deadline := time.Now().Add(settle)
	for {
		if _, err := c.log.await(context.Background(), 2*time.Second, allBegunSince(disabled, c.total, "w1", "w3")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("items not all begun by w1 and w3 within %v after `disable`:\n%s", settle, tail(c.log.all(), 30))
		}
		c.cli(cliBin, []string{"trigger"}, job)
	}
	if b := beganSince(c.log.all(), "w2", disabled.Add(2*time.Second)); len(b) > 0 {
		t.Errorf("disabled w2 began %d items after `disable` took effect, first: %s", len(b), b[0])
	}

	// config set cron: the workers run on the new schedule without triggers.
	set := time.Now()
	c.cli(cliBin, []string{"config", "set"}, job, "cron", "* * * * * ?")
	first := c.log.waitFor(t, settle, "every item begun on the new cron", allBegunSince(set, c.total, "w1", "w3"))
	second := time.UnixMilli(first[len(first)-1].T).Add(time.Second)
	c.log.waitFor(t, settle, "every item begun again a second later (scheduled, not triggered)", allBegunSince(second, c.total, "w1", "w3"))
	c.checkInvariants("w1", "w2", "w3")
}

func serverFlag(st coord.JobStatus, id string, ok func(coord.ServerStatus) bool) error {
	for _, s := range st.Servers {
		if s.ID == id {
			if ok(s) {
				return nil
			}
			return fmt.Errorf("server %s: %+v", id, s)
		}
	}
	return fmt.Errorf("server %s not in status", id)
}

func serverSummary(st coord.JobStatus) string {
	var parts []string
	for _, s := range st.Servers {
		parts = append(parts, fmt.Sprintf("%s:%s:%v:d=%v:p=%v", s.ID, s.Status, s.Sharding, s.Disabled, s.Paused))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func itemSummary(st coord.JobStatus) string {
	var parts []string
	for _, it := range st.Items {
		parts = append(parts, fmt.Sprintf("%d:d=%v:f=%q", it.Item, it.Disabled, it.Failover))
	}
	return strings.Join(parts, " ")
}
