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

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/health"
	"github.com/shardflow/shardflow/stats"
)

// serveMetrics returns the Collector serve's Node reports to and the
// registry /metrics exposes: the jobs' metrics labelled with the server id
// the Node will take (the flag, else the Registry's default), beside the Go
// runtime's and the process's.
func serveMetrics(serverID string) (*stats.Collector, *prometheus.Registry, error) {
	if serverID == "" {
		id, err := coord.DefaultServerID()
		if err != nil {
			return nil, nil, fmt.Errorf("--server-id is empty and no non-loopback IPv4 address was found (%v); set --server-id (e.g. the pod name)", err)
		}
		serverID = id
	}
	c := stats.NewCollector(serverID)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return c, reg, nil
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
