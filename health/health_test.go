package health_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardflow/shardflow/coord/memstore"
	"github.com/shardflow/shardflow/coord/store"
	"github.com/shardflow/shardflow/coord/zkstore"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/health"
	"github.com/shardflow/shardflow/integration"
	"github.com/shardflow/shardflow/internal/testsignal"
)

// idle is a job with nothing to do; the tests only need it joined.
type idle struct{}

func (idle) Fetch(context.Context, dataflow.Shard) ([]int, error) { return nil, nil }
func (idle) Process(context.Context, dataflow.Shard, int) error   { return nil }
func quiet() *slog.Logger                                         { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func jobConfig(name string) dataflow.JobConfig {
	return dataflow.JobConfig{JobName: name, ShardingTotalCount: 2} // no Cron: run only by triggers
}

func testCtx(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), time.Minute)
}

// serve serves h over real HTTP on a free port of 127.0.0.1 until the
// test ends.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		http.DefaultClient.CloseIdleConnections()
	})
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// want fails t unless GET path answers code with a body containing has.
func want(t *testing.T, base, path string, code int, has string) {
	t.Helper()
	got, body := get(t, base, path)
	if got != code || !strings.Contains(body, has) {
		t.Fatalf("GET %s: %d %q, want %d containing %q", path, got, body, code, has)
	}
}

// The endpoints over the embedded store: not ready before Start, ready
// once started with its job joined, metrics served, not ready once Stop
// has begun; alive throughout.
func TestEndpointsFollowTheNodesLife(t *testing.T) {
	ctx, cancel := testCtx(t)
	defer cancel()
	reg := prometheus.NewRegistry()
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "h1", Logger: quiet(), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, health.Handler(node, reg))
	want(t, base, health.LivenessPath, http.StatusOK, "ok")
	want(t, base, health.ReadinessPath, http.StatusServiceUnavailable, "not started")

	if err := dataflow.AddJob[int](ctx, node, jobConfig("life"), idle{}); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, base, health.ReadinessPath, http.StatusOK, "ready")
	want(t, base, health.MetricsPath, http.StatusOK, `shardflow_items_processed_total{job="life",result="success",server="h1"}`)

	if err := node.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, base, health.ReadinessPath, http.StatusServiceUnavailable, "stopping")
	want(t, base, health.LivenessPath, http.StatusOK, "ok")
}

// Without a Gatherer /metrics is not served, and only GET is.
func TestMetricsOptional(t *testing.T) {
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: memstore.NewServer().Connect(), ServerID: "h2", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop(t.Context())
	base := serve(t, health.Handler(node, nil))
	want(t, base, health.MetricsPath, http.StatusNotFound, "")
	resp, err := http.Post(base+health.LivenessPath, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST %s: %d, want 405", health.LivenessPath, resp.StatusCode)
	}
}

// On real ZooKeeper behind the fault proxy: /readyz turns 503 naming the
// session's state while ZooKeeper is unreachable, both while the session
// may still resume (suspended) and once it has expired (lost), and 200
// again once the path is restored (the same session resumed, or this
// server re-registered on a new one); /healthz stays 200 throughout.
func TestReadinessFollowsTheStoreOnZooKeeper(t *testing.T) {
	zk := integration.SharedZooKeeper(t)
	ctx, cancel := testCtx(t)
	defer cancel()
	proxy := integration.NewProxy(t, zk.Servers()[0])
	st, err := zkstore.Open(ctx, zkstore.Config{Servers: []string{proxy.Addr()}, SessionTimeout: 4 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sig := testsignal.NewCoord()
	ns := fmt.Sprintf("health-%d", time.Now().UnixNano())
	node, err := dataflow.NewNode(testsignal.WithNodeSignals(dataflow.NodeConfig{Store: st, Namespace: ns, ServerID: "z1", Logger: quiet()}, sig))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop(context.Background())
	if err := dataflow.AddJob[int](ctx, node, jobConfig("zk"), idle{}); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}
	base := serve(t, health.Handler(node, nil))
	want(t, base, health.ReadinessPath, http.StatusOK, "ready")
	first, _ := st.Session()

	// Suspended: the connection is down, the session may still resume.
	proxy.Cut()
	await(t, ctx, st, "suspended", func(s store.Session) bool { return s.State == store.StateSuspended })
	want(t, base, health.ReadinessPath, http.StatusServiceUnavailable, "coordination session suspended")
	want(t, base, health.LivenessPath, http.StatusOK, "ok")
	proxy.Restore()
	await(t, ctx, st, "the same session resumed", func(s store.Session) bool { return s.State == store.StateConnected && s.ID == first.ID })
	want(t, base, health.ReadinessPath, http.StatusOK, "ready")

	// Lost: cut past the session timeout; back on a new session once
	// this server has re-registered (its election, run after the
	// registration, makes it the job's leader again).
	proxy.Cut()
	await(t, ctx, st, "lost", func(s store.Session) bool { return s.State == store.StateLost })
	want(t, base, health.ReadinessPath, http.StatusServiceUnavailable, "coordination session lost")
	sig.Elected.Wait(t, time.Minute, "the first election", nil) // drain the join's
	proxy.Restore()
	await(t, ctx, st, "a new session", func(s store.Session) bool { return s.State == store.StateConnected && s.ID != first.ID })
	sig.Elected.Wait(t, time.Minute, "re-registered and elected on the new session", nil)
	want(t, base, health.ReadinessPath, http.StatusOK, "ready")
}

func await(t *testing.T, ctx context.Context, st store.Store, what string, ok func(store.Session) bool) {
	t.Helper()
	if cur, err := store.AwaitSession(ctx, st, ok); err != nil {
		t.Fatalf("waiting for the session to be %s: %v (last %v)", what, err, cur.State)
	}
}
