package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shardflow/shardflow/health"
)

// serveMetrics returns the registry /metrics exposes: the Go runtime's
// and the process's metrics; serve's Node registers its jobs' metrics in
// it, labelled with the Node's own server id.
func serveMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// startHealthServer serves package health's endpoints for node on addr
// (e.g. ":8080") until the returned stop is called. It listens before it
// returns, so a taken or malformed address is an error here, naming --http.
// serve stops it after the Node has stopped: liveness holds while the Node
// drains, and readiness reports the drain.
func startHealthServer(addr string, node health.Readier, metrics prometheus.Gatherer, stdout, stderr io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w (give a free host:port, e.g. :8080)", addr, err)
	}
	srv := &http.Server{Handler: health.Handler(node, metrics), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(stderr, "serve: health endpoints on %s: %v\n", ln.Addr(), err)
		}
	}()
	fmt.Fprintf(stdout, "serve: health endpoints on http://%s (%s %s %s)\n", ln.Addr(), health.LivenessPath, health.ReadinessPath, health.MetricsPath)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
