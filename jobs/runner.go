package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/dataflow"
	"github.com/shardflow/shardflow/internal/redact"
)

// runner turns a Node's stored SCRIPT and HTTP jobs into SimpleFuncs that
// read the job's current config at every item run, so a live `shardflow
// config set` of the command or URL applies at the next trigger, and check
// it against the allow-list every time.
type runner struct {
	n         *dataflow.Node
	allow     *AllowList
	secrets   secrets
	scriptEnv []string // --script-env: variables passed to scripts
	logger    *slog.Logger
	transport *http.Transport
	client    *http.Client

	mu      sync.Mutex
	refused map[string]string // job -> reason reported in the store
}

func newRunner(n *dataflow.Node, allow *AllowList, sec secrets, logger *slog.Logger) *runner {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	r := &runner{n: n, allow: allow, secrets: sec, logger: logger, transport: tr, refused: map[string]string{}}
	r.client = &http.Client{
		Transport: tr,
		// A redirect must stay inside the allow-list too.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return fmt.Errorf("jobs: stopped after 10 redirects")
			}
			return allow.CheckURL(req.URL.String())
		},
	}
	return r
}

// check returns nil if this worker may run cfg: a SCRIPT or HTTP job whose
// command or URL the allow-list permits.
func (r *runner) check(cfg jobconfig.Config) error {
	_, err := r.resolve(cfg)
	return err
}

// resolve is check that also returns a SCRIPT job's program as checked
// (its real path), which is what runs.
func (r *runner) resolve(cfg jobconfig.Config) (string, error) {
	switch cfg.Type() {
	case jobconfig.JobTypeScript:
		argv, err := jobconfig.SplitCommandLine(cfg.Script.CommandLine)
		if err != nil {
			return "", err
		}
		return r.allow.ResolveCommand(argv)
	case jobconfig.JobTypeHTTP:
		return "", r.allow.CheckURL(cfg.HTTP.URL)
	}
	return "", fmt.Errorf("jobs: job %q is a %s job; a worker runs only SCRIPT and HTTP jobs", cfg.JobName, cfg.Type())
}

// run is the SimpleFunc of every stored job.
func (r *runner) run(ctx context.Context, shard dataflow.Shard) error {
	cfg, ok := r.n.JobConfig(shard.JobName)
	if !ok {
		return fmt.Errorf("jobs: job %q is not on this node", shard.JobName)
	}
	prog, err := r.resolve(cfg)
	if err != nil {
		r.setRefused(ctx, shard.JobName, err.Error())
		return err
	}
	r.setRefused(ctx, shard.JobName, "")
	c := NewShardContext(shard)
	if cfg.Type() == jobconfig.JobTypeScript {
		argv, _ := jobconfig.SplitCommandLine(cfg.Script.CommandLine) // checked above
		return RunScript(ctx, argv, c, ScriptOptions{Path: prog, Env: r.scriptEnv, Logger: r.logger})
	}
	header, values, err := r.secrets.headers(cfg.HTTP.Headers)
	if err != nil {
		return err
	}
	target, urlSecrets, err := r.secrets.url(cfg.HTTP.URL)
	if err != nil {
		return err
	}
	// The stored URL passed the allow-list; the resolved one must too (a
	// secret must not steer the request elsewhere).
	if err := r.allow.CheckURL(target); err != nil {
		return fmt.Errorf("jobs: job %q: its URL with the secrets resolved is not allowed: %w", shard.JobName, ErrNotAllowed)
	}
	return RunHTTP(ctx, r.client, HTTPRequest{Method: cfg.HTTP.Method, URL: target, Header: header, Secrets: append(values, urlSecrets...)}, c)
}

// setRefused reports (reason != "") or clears this server's refusal of
// job in the store, when it changes.
func (r *runner) setRefused(ctx context.Context, job, reason string) {
	r.mu.Lock()
	prev, had := r.refused[job]
	reason = redact.Text(reason) // it is stored, shown and logged
	if reason == "" {
		delete(r.refused, job)
	} else {
		r.refused[job] = reason
	}
	r.mu.Unlock()
	if (reason == "" && !had) || (reason != "" && had && prev == reason) {
		return
	}
	st, ns, id := r.n.Store(), r.n.Namespace(), r.n.ServerID()
	var err error
	if reason == "" {
		err = clearRefused(ctx, st, ns, job, id)
	} else {
		r.logger.Warn("jobs: refusing to run a stored job", "job", job, "reason", reason)
		err = reportRefused(ctx, st, ns, job, id, reason)
	}
	if err != nil {
		r.logger.Warn("jobs: recording a refusal in the store", "job", job, "err", err)
	}
}

// forget drops job's local refusal state (the job left the namespace).
func (r *runner) forget(job string) {
	r.mu.Lock()
	delete(r.refused, job)
	r.mu.Unlock()
}

// refusals returns a copy of the current refusals.
func (r *runner) refusals() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.refused))
	for k, v := range r.refused {
		out[k] = v
	}
	return out
}
