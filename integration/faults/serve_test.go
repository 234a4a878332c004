package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/proctest"
	"github.com/shardflow/shardflow/internal/testwait"
)

// TestServeScriptJobs: two `shardflow serve` worker processes on real
// ZooKeeper run a script job added with `shardflow job add`, each item
// once per trigger, split between them; a command outside their
// allow-list never runs and shows as refused; an item timeout kills the
// script's process group (its grandchild is gone); `job remove` drops the
// job from both; a worker SIGKILLed mid-script has its item failed over to
// the other.
func TestServeScriptJobs(t *testing.T) {
	t.Parallel()
	zk := integration.SharedZooKeeper(t)
	bin := integration.BuildBinary(t, "github.com/shardflow/shardflow/cmd/shardflow")
	ns := fmt.Sprintf("serve%d", time.Now().UnixNano())
	dir := t.TempDir()
	conn := []string{"--zk", strings.Join(zk.Servers(), ","), "--namespace", ns}
	cli := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append(args, conn...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("shardflow %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		return out.String()
	}
	serve := func(id string) *integration.Process {
		return integration.StartProcess(t, bin, append([]string{"serve", "--server-id", id, "--allow-command", "/bin/sh -c ...",
			"--session-timeout", "4s", "-v"}, conn...), nil)
	}
	s1, s2 := serve("s1"), serve("s2")

	ctx := context.Background()
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: zk.Servers()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	admin := coord.NewAdmin(st, ns)
	// settled waits until exactly servers run job with a settled sharding.
	settled := func(job string, servers ...string) {
		t.Helper()
		testwait.ForNoError(t, 60*time.Second, fmt.Sprintf("%s run by %v, sharding settled", job, servers), func() error {
			s, err := admin.Status(ctx, job)
			if err != nil {
				return err
			}
			var live []string
			for _, srv := range s.Servers {
				if srv.Status != "OFFLINE" {
					if len(srv.Sharding) == 0 {
						return fmt.Errorf("%s has no items yet", srv.ID)
					}
					live = append(live, srv.ID)
				}
			}
			if s.ReshardingPending || !slices.Equal(live, servers) {
				return fmt.Errorf("live %v, resharding pending %v", live, s.ReshardingPending)
			}
			return nil
		})
	}
	lines := func(path string) []string {
		b, _ := os.ReadFile(path)
		return strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
	}

	// Each item once per trigger, split between the workers.
	cli("job", "add", "--job", "touch", "--type", "script", "--total", "4",
		"--command", fmt.Sprintf(`/bin/sh -c 'echo "$SHARDFLOW_SERVER_ID" >> %s/touch.$SHARDFLOW_ITEM' sh`, dir))
	settled("touch", "s1", "s2")
	servers := map[string]bool{}
	for round := 1; round <= 2; round++ {
		cli("trigger", "--job", "touch")
		for item := range 4 {
			path := filepath.Join(dir, fmt.Sprintf("touch.%d", item))
			testwait.For(t, 30*time.Second, fmt.Sprintf("round %d of item %d", round, item), func() bool { return len(lines(path)) >= round })
		}
		for item := range 4 {
			got := lines(filepath.Join(dir, fmt.Sprintf("touch.%d", item)))
			if len(got) != round {
				t.Fatalf("after %d triggers item %d ran %d times (%v)", round, item, len(got), got)
			}
			servers[got[round-1]] = true
		}
	}
	if len(servers) != 2 {
		t.Fatalf("items ran on %v, want both workers", servers)
	}

	// A command outside the allow-list is refused by both and never runs.
	evil := filepath.Join(dir, "evil")
	cli("job", "add", "--job", "evil", "--type", "script", "--total", "2", "--command", "/usr/bin/touch "+evil)
	testwait.ForNoError(t, 30*time.Second, "both workers refusing evil", func() error {
		s, err := admin.Status(ctx, "evil")
		if err != nil {
			return err
		}
		if len(s.Refused) != 2 || len(s.Servers) != 0 {
			return fmt.Errorf("refused %v, servers %v", s.Refused, s.Servers)
		}
		return nil
	})
	if out := cli("status", "--job", "evil"); !strings.Contains(out, "REFUSED by s1") || !strings.Contains(out, "REFUSED by s2") {
		t.Fatalf("status does not show the refusals:\n%s", out)
	}
	if _, err := os.Stat(evil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused command ran: %v", err)
	}

	// An item timeout kills the script's process group, grandchild included.
	cli("job", "add", "--job", "slow", "--type", "script", "--total", "2", "--timeout", "2s",
		"--command", fmt.Sprintf(`/bin/sh -c 'sleep 1000 & echo $! > %s/slow.$SHARDFLOW_ITEM.tmp; mv %s/slow.$SHARDFLOW_ITEM.tmp %s/slow.$SHARDFLOW_ITEM; wait' sh`, dir, dir, dir))
	settled("slow", "s1", "s2")
	cli("trigger", "--job", "slow")
	for item := range 2 {
		pid := proctest.ReadPid(t, 30*time.Second, filepath.Join(dir, fmt.Sprintf("slow.%d", item)))
		testwait.For(t, 30*time.Second, fmt.Sprintf("grandchild %d of item %d killed by the timeout", pid, item), func() bool { return proctest.Gone(pid) })
	}
	s1.RequireLine(t, `timed out after 2s`, 30*time.Second)
	s2.RequireLine(t, `timed out after 2s`, 30*time.Second)

	// job remove drops the job from both workers.
	cli("job", "remove", "--job", "touch")
	s1.RequireLine(t, `stored job removed" job=touch`, 30*time.Second)
	s2.RequireLine(t, `stored job removed" job=touch`, 30*time.Second)
	if out := cli("job", "list"); strings.Contains(out, "\ntouch ") {
		t.Fatalf("job list still lists the removed job:\n%s", out)
	}

	// A worker killed mid-script: its item fails over to the other, and the
	// script's process (Pdeathsig) dies with it.
	cli("job", "add", "--job", "fo", "--type", "script", "--total", "2", "--failover",
		"--command", fmt.Sprintf(`/bin/sh -c 'echo "$SHARDFLOW_SERVER_ID" >> %s/fo.$SHARDFLOW_ITEM; if [ "$SHARDFLOW_SERVER_ID" = s1 ]; then echo $$ > %s/fo.pid.tmp; mv %s/fo.pid.tmp %s/fo.pid; exec sleep 1000; fi' sh`, dir, dir, dir, dir))
	settled("fo", "s1", "s2")
	s, err := admin.Status(ctx, "fo")
	if err != nil {
		t.Fatal(err)
	}
	var s1Item int
	for _, srv := range s.Servers {
		if srv.ID == "s1" {
			s1Item = srv.Sharding[0]
		}
	}
	cli("trigger", "--job", "fo")
	pid := proctest.ReadPid(t, 30*time.Second, filepath.Join(dir, "fo.pid"))
	if err := s1.Kill(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("fo.%d", s1Item))
	testwait.For(t, 60*time.Second, fmt.Sprintf("item %d failed over to s2", s1Item), func() bool { return slices.Contains(lines(path), "s2") })
	if got := lines(path); !slices.Equal(got, []string{"s1", "s2"}) {
		t.Fatalf("item %d runs %v, want s1 (killed) then s2", s1Item, got)
	}
	testwait.For(t, 30*time.Second, fmt.Sprintf("the killed worker's script %d gone", pid), func() bool { return proctest.Gone(pid) })
}
