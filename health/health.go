// Package health serves a shardflow process's probes and metrics over HTTP:
//
//	/healthz  200 while the process serves HTTP at all (liveness)
//	/readyz   200 when the Node is ready (dataflow.Node.Ready), else 503 with the reason
//	/metrics  the Prometheus exposition of a Gatherer (404 when none is given)
//
// Any program hosting a dataflow.Node mounts it beside its own handlers:
//
//	mux := http.NewServeMux()
//	health.Mount(mux, node, promRegistry)
//
// `shardflow serve --http ADDR` serves exactly this handler. Readiness is
// the Node's view (session connected, every job registered on it, not
// stopping); liveness asks nothing, so a store outage makes pods unready
// but never restarts them (a restart would not bring the store back, and
// would cost the session its items).
package health

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The paths Mount serves; deploy/kubernetes's probes and ServiceMonitor
// name them (a test checks they agree).
const (
	LivenessPath  = "/healthz"
	ReadinessPath = "/readyz"
	MetricsPath   = "/metrics"
)

// Readier is what /readyz asks: nil when ready, else the reason.
// *dataflow.Node implements it (Node.Ready).
type Readier interface {
	Ready() error
}

// Mount registers the three endpoints on mux. node must not be nil;
// metrics nil leaves /metrics unserved (404).
func Mount(mux *http.ServeMux, node Readier, metrics prometheus.Gatherer) {
	mux.HandleFunc("GET "+LivenessPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+ReadinessPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := node.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if metrics != nil {
		mux.Handle("GET "+MetricsPath, promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	}
}

// Handler returns a new ServeMux serving only the three endpoints (see
// Mount).
func Handler(node Readier, metrics prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	Mount(mux, node, metrics)
	return mux
}
