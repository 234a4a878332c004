package integration_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testwait"
)

func mustCompile(s string) *regexp.Regexp { return regexp.MustCompile(s) }

// regexpLineAfter matches any tick line numbered higher than the last tick
// among the first n lines.
func regexpLineAfter(p *integration.Process, n int) *regexp.Regexp {
	last := 0
	for _, l := range p.Lines()[:n] {
		_, _ = fmt.Sscanf(l, "tick %d", &last)
	}
	alts := make([]string, 0, 3)
	for i := last + 1; i <= last+3; i++ {
		alts = append(alts, fmt.Sprint(i))
	}
	return regexp.MustCompile(`^tick (` + strings.Join(alts, "|") + `)$`)
}

// waitProcState polls /proc/<pid>/stat until the process is in state want
// ('T' = stopped).
func waitProcState(t *testing.T, pid int, want byte) {
	t.Helper()
	testwait.ForNoError(t, 10*time.Second, fmt.Sprintf("process %d in state %c", pid, want), func() error {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		if i := strings.LastIndexByte(string(data), ')'); i >= 0 && i+2 < len(data) && data[i+2] == want {
			return nil
		}
		return fmt.Errorf("stat: %s", data)
	})
}
