package protocol_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/protocol"
	"github.com/shardflow/shardflow/integration"
)

// warnRecorder is a slog.Handler keeping every record at Warn or above.
type warnRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (w *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	w.mu.Lock()
	w.recs = append(w.recs, b.String())
	w.mu.Unlock()
	return nil
}

func (w *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnRecorder) WithGroup(string) slog.Handler      { return w }

// testShutdownIsQuiet closes several registries of one job at once, so that
// elections, resharding flags and re-arms are cut short by the stopping
// watchers, and asserts that none of it is logged as a warning: a
// cancelled context during Leave or Close is not a failure.
func testShutdownIsQuiet(t *testing.T, b coordtest.Backend, rounds int) {
	rec := &warnRecorder{}
	log := slog.New(rec)
	for round := range rounds {
		ns := fmt.Sprintf("quiet%d_%d", time.Now().UnixNano()%1e6, round)
		regs := make([]*protocol.Registry, 3)
		for i := range regs {
			reg, err := protocol.NewRegistry(b.Connect(t), protocol.RegistryConfig{Namespace: ns, ServerID: fmt.Sprintf("s%d", i), Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err = reg.Join(ctx, coordtest.Config("job", 4, func(c *jobconfig.Config) { c.Failover = true }))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			regs[i] = reg
		}
		var wg sync.WaitGroup
		for _, reg := range regs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := reg.Close(ctx); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		}
		wg.Wait()
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.recs) > 0 {
		t.Fatalf("%d warnings logged while shutting down, want none:\n%s", len(rec.recs), strings.Join(rec.recs, "\n"))
	}
}

func TestShutdownIsQuiet(t *testing.T) { testShutdownIsQuiet(t, coordtest.Mem(), 30) }

func TestShutdownIsQuietZooKeeper(t *testing.T) {
	zk := integration.SharedZooKeeper(t)
	testShutdownIsQuiet(t, coordtest.ZooKeeper(t, coordtest.ZooKeeperConfig{Server: zk.Servers()[0]}), 10)
}
