package protocol_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/coordtest"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/protocol"
)

// TestStoredConfigWinsIsLogged: a local config that loses to the stored one
// is logged at Warn, naming the differing fields.
func TestStoredConfigWinsIsLogged(t *testing.T) {
	srv := memstore.NewServer()
	first := srv.Connect()
	t.Cleanup(func() { _ = first.Close() })
	regA, err := protocol.NewRegistry(first, protocol.RegistryConfig{ServerID: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = regA.Close(context.Background()) })
	if _, err := regA.Join(ctxT(t), coordtest.Config("j", 4)); err != nil {
		t.Fatal(err)
	}
	rec := &warnRecorder{}
	second := srv.Connect()
	t.Cleanup(func() { _ = second.Close() })
	regB, err := protocol.NewRegistry(second, protocol.RegistryConfig{ServerID: "b", Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = regB.Close(context.Background()) })
	jb, err := regB.Join(ctxT(t), coordtest.Config("j", 6, func(c *jobconfig.Config) { c.FetchDataCount = 10 }))
	if err != nil {
		t.Fatal(err)
	}
	if got := jb.Config().ShardingTotalCount; got != 4 {
		t.Fatalf("effective total %d, want the stored 4", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var found string
	for _, r := range rec.recs {
		if strings.Contains(r, "stored job config wins") {
			found = r
		}
	}
	if !strings.Contains(found, `shardingTotalCount: local "6", stored "4"`) || !strings.Contains(found, "fetchDataCount") || strings.Contains(found, "cron") {
		t.Fatalf("warning %q, want one naming shardingTotalCount and fetchDataCount only; all: %v", found, rec.recs)
	}
}

// TestJoinWaitsForOwnDyingSession: a restart under the same server id while
// the previous incarnation's session is dying (killed, not yet expired)
// waits for it instead of failing; a live duplicate still fails, naming the
// setting.
func TestJoinWaitsForOwnDyingSession(t *testing.T) {
	srv := memstore.NewServer()
	old := srv.Connect(memstore.WithSessionTimeout(300 * time.Millisecond))
	t.Cleanup(func() { _ = old.Close() })
	quiet := slog.New(slog.DiscardHandler)
	regOld, err := protocol.NewRegistry(old, protocol.RegistryConfig{ServerID: "a", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = regOld.Close(context.Background()) })
	if _, err := regOld.Join(ctxT(t), coordtest.Config("j", 2)); err != nil {
		t.Fatal(err)
	}
	// A live duplicate with a short wait is refused, naming the setting.
	dup := srv.Connect(memstore.WithSessionTimeout(200 * time.Millisecond))
	t.Cleanup(func() { _ = dup.Close() })
	regDup, err := protocol.NewRegistry(dup, protocol.RegistryConfig{ServerID: "a", ServerIDSetting: "NodeConfig.ServerID", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = regDup.Close(context.Background()) })
	if _, err := regDup.Join(ctxT(t), coordtest.Config("j", 2)); !errors.Is(err, protocol.ErrServerIDInUse) || !strings.Contains(err.Error(), "NodeConfig.ServerID") {
		t.Fatalf("live duplicate: Join = %v, want ErrServerIDInUse naming NodeConfig.ServerID", err)
	}
	// The process dies: its session is cut and expires after 300 ms.
	old.Disconnect()
	next := srv.Connect()
	t.Cleanup(func() { _ = next.Close() })
	regNext, err := protocol.NewRegistry(next, protocol.RegistryConfig{ServerID: "a", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = regNext.Close(context.Background()) })
	if _, err := regNext.Join(ctxT(t), coordtest.Config("j", 2)); err != nil {
		t.Fatalf("restart while the old session dies: Join = %v, want it to wait and succeed", err)
	}
}
