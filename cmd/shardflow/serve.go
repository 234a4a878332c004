package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/redact"
	"github.com/shardflow/shardflow/jobs"
)

// defaultStopGrace is --stop-grace's default: how long runs in progress
// get to finish after SIGTERM before their contexts are cancelled (a
// script's process group is killed). Kubernetes' default
// terminationGracePeriodSeconds (30 s) must exceed it, hence 25 s.
const defaultStopGrace = 25 * time.Second

// runServe is `shardflow serve`: a worker process running every stored
// SCRIPT and HTTP job of the namespace its allow-lists permit, picking up
// added jobs and dropping removed ones without a restart.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.ZKFlagSet("serve", stderr)
	var allowCmd, allowURL, scriptEnv stringList
	serverID := fs.String("server-id", "", "this worker's id among a job's servers (default: the first non-loopback IPv4 address; set one per process when several share a host)")
	fs.Var(&allowCmd, "allow-command", `a command line this worker may run: words, "*" one argument, a last "..." any further ones, e.g. "/opt/jobs/export --day=*" (repeatable; see docs/operations.md)`)
	fs.Var(&allowURL, "allow-url", `a URL prefix this worker may request, e.g. "https://jobs.internal/run/" (repeatable)`)
	fs.Var(&scriptEnv, "script-env", "a variable of this worker's environment its scripts get besides PATH, HOME, LANG, ... and the SHARDFLOW_* run context (repeatable; never the worker's SHARDFLOW_* credentials)")
	secretDir := fs.String("secret-dir", "", `directory whose files an HTTP job's header may name as ${file:NAME} (a mounted secret); ${env:NAME} reads this worker's SHARDFLOW_SECRET_* variables`)
	fs.DurationVar(&cf.SessionTimeout, "session-timeout", 0, "ZooKeeper session timeout: how long after a crash this worker's items fail over (default 10s)")
	verbose := fs.Bool("v", false, "log every run (info level) instead of warnings and errors only")
	historyPG := new(string)
	secretVar(fs, historyPG, "history-pg", envHistoryPG, `Postgres DSN: record every item run there (table shardflow_history; see "shardflow history")`)
	httpAddr := fs.String("http", "", "serve /healthz, /readyz and /metrics on this address, e.g. :8080 (default: none)")
	offlineGrace := fs.Duration("offline-server-grace", 0, "how long a job's leader keeps a server that went offline before pruning it from status (default 10m); with a new --server-id per pod, how long a replaced pod stays listed OFFLINE")
	stopGrace := fs.Duration("stop-grace", defaultStopGrace, "on SIGTERM, how long runs in progress get to finish before they are cancelled; keep it below Kubernetes' terminationGracePeriodSeconds (docs/kubernetes.md)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if len(allowCmd) == 0 && len(allowURL) == 0 {
		return cli.Usagef("give at least one --allow-command or --allow-url: a worker runs only the stored commands and URLs it is allowed to")
	}
	if _, err := jobs.NewAllowList(allowCmd, allowURL); err != nil {
		return cli.Usagef("%s", err.Error())
	}
	if err := jobs.CheckScriptEnv(scriptEnv); err != nil {
		return cli.Usagef("%s", err.Error())
	}
	if *offlineGrace < 0 {
		return cli.Usagef("--offline-server-grace %s must not be negative (0: the default, 10m)", *offlineGrace)
	}
	if *stopGrace <= 0 {
		return cli.Usagef("--stop-grace %s must be positive, e.g. 25s", *stopGrace)
	}
	// metrics stays a nil interface without --http: no metrics.
	var metrics prometheus.Registerer
	var gatherer prometheus.Gatherer
	if *httpAddr != "" {
		reg := serveMetrics()
		metrics, gatherer = reg, reg
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	st, _, err := cf.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	rec, stopHistory, err := startHistoryRecorder(ctx, *historyPG, logger)
	if err != nil {
		return err
	}
	defer stopHistory() // after node.Stop below: the last runs are recorded
	node, err := dataflow.NewNode(dataflow.NodeConfig{Store: st, Namespace: cf.Namespace, ServerID: *serverID, Logger: logger, History: rec, Metrics: metrics,
		OfflineServerGrace: *offlineGrace})
	if err != nil {
		return err
	}
	worker, err := jobs.NewWorker(node, jobs.WorkerConfig{AllowCommands: allowCmd, AllowURLs: allowURL,
		ScriptEnv: scriptEnv, SecretDir: *secretDir, Logger: logger})
	if err != nil {
		return err
	}
	if *httpAddr != "" {
		stopHTTP, err := startHealthServer(*httpAddr, node, gatherer, stdout, stderr)
		if err != nil {
			_ = node.Stop(context.Background())
			return err
		}
		defer stopHTTP() // after node.Stop below: alive while draining
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	if err := worker.Start(ctx); err != nil {
		_ = node.Stop(context.Background())
		return err
	}
	fmt.Fprintf(stdout, "serve: worker %s running the stored jobs of namespace %s (allowed commands %q, URLs %q)\n",
		node.ServerID(), cf.Namespace, []string(allowCmd), redactAll(allowURL))
	<-ctx.Done()

	sctx, cancel := context.WithTimeout(context.Background(), *stopGrace)
	defer cancel()
	werr := worker.Stop(sctx)
	nerr := node.Stop(sctx)
	if nerr != nil {
		// The runs were cancelled at --stop-grace; the leave that follows
		// is bounded by the Node (10 s): wait for it, so the items are
		// resharded now rather than after the session timeout.
		<-node.Stopped()
	}
	if werr != nil {
		return fmt.Errorf("serve: stopping the worker: %w", werr)
	}
	if nerr != nil {
		return fmt.Errorf("serve: stopping (runs cancelled after --stop-grace %s): %w", *stopGrace, nerr)
	}
	fmt.Fprintln(stdout, "serve: stopped")
	return nil
}

// redactAll returns the URLs with their secrets redacted, for printing.
func redactAll(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redact.URL(u)
	}
	return out
}
