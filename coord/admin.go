package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// Admin is the operator API over a namespace: status, trigger, pause, resume,
// disable, enable, shutdown, remove, config get/set. It needs no Node:
// any process with a store session can act. server "" means every server.
//
// Every input is checked against the job's current stored state before
// anything is written, so the CLI, the console and programs get the same
// checks: a job that exists (ErrNoJob), a server registered for it
// (ErrNoServer), an item in 0..shardingTotalCount-1 (ErrNoItem), and config
// values through jobconfig's validation (a *jobconfig.FieldError naming the
// field and the fix). A refused action changes nothing.
//
// Each action that succeeds is recorded in the job's bounded audit log
// (JobStatus.Actions) under the Admin's actor (As); refused ones are not.
type Admin struct {
	tree  // the store and namespace, shared by the Admins As returns
	actor string
}

// NewAdmin returns an Admin over st for namespace (default
// DefaultNamespace). Its actions are recorded as done by "user@host" of
// this process; As names another actor.
func NewAdmin(st store.Store, namespace string) *Admin {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &Admin{tree: tree{st: st, ns: namespace}, actor: defaultActor()}
}

// As returns an Admin sharing a's store and namespace whose actions are
// recorded as done by actor (e.g. "console:alice from 10.0.0.7").
func (a *Admin) As(actor string) *Admin { return &Admin{tree: a.tree, actor: actor} }

// Actor returns the name a's actions are recorded under.
func (a *Admin) Actor() string { return a.actor }

// Jobs lists the job names in the namespace, sorted.
func (a *Admin) Jobs(ctx context.Context) ([]string, error) {
	names, _, err := a.st.Children(ctx, store.Join(a.ns))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coord: list jobs under %s: %w", store.Join(a.ns), err)
	}
	var out []string
	for _, n := range names {
		if ok, _, err := a.st.Exists(ctx, store.Join(a.ns, n, layout.NConfig)); err == nil && ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Status reads a job's full status (see JobStatus), with its secrets
// redacted: the values of secret config fields (jobconfig.IsSecretField:
// HTTP header values, URL query strings) read "REDACTED" in Config, and
// in every error text, refusal reason and audit entry. Every view shows
// this model; Config returns the stored values for programs that run the
// job.
func (a *Admin) Status(ctx context.Context, job string) (JobStatus, error) {
	st, err := a.status(ctx, job)
	redactStatus(&st)
	return st, err
}

// Config reads the job's stored config, secrets included: for programs
// that run the job. Views show Status, which redacts them. A stored
// config that does not decode or validate is ErrBadConfig.
func (a *Admin) Config(ctx context.Context, job string) (jobconfig.Config, error) {
	p, err := a.requireJob(ctx, job)
	if err != nil {
		return jobconfig.Config{}, err
	}
	fields, err := a.readFields(ctx, p)
	if err != nil {
		return jobconfig.Config{}, err
	}
	return layout.DecodeStoredConfig(p, job, fields)
}

// Trigger asks every server of the job that can run it to run now (see
// TriggerServer).
func (a *Admin) Trigger(ctx context.Context, job string) error {
	_, err := a.TriggerServer(ctx, job, "")
	return err
}

// TriggerServer asks server alone to run the job now, or with server ""
// every server that can, and returns the servers asked. A server can run
// when it is online and neither shut down, disabled (it owns no items) nor
// paused: a named server that cannot is refused with ErrCannotRun saying
// why, an unregistered one with ErrNoServer; with server "" the others are
// skipped, and ErrCannotRun when none is left.
func (a *Admin) TriggerServer(ctx context.Context, job, server string) ([]string, error) {
	var asked []string
	err := a.act(ctx, Action{Job: job, Action: "trigger", Server: server}, func(p layout.JobPaths) error {
		var err error
		asked, err = a.trigger(ctx, p, job, server)
		return err
	})
	return asked, err
}

// Pause stops new runs (and streaming loops) on server, or on all servers.
func (a *Admin) Pause(ctx context.Context, job, server string) error {
	return a.serverAction(ctx, "pause", job, server, layout.NPaused, true)
}

// Resume undoes Pause.
func (a *Admin) Resume(ctx context.Context, job, server string) error {
	return a.serverAction(ctx, "resume", job, server, layout.NPaused, false)
}

// Disable takes server (or all) out of sharding; kept across its restarts.
func (a *Admin) Disable(ctx context.Context, job, server string) error {
	return a.serverAction(ctx, "disable", job, server, layout.NDisabled, true)
}

// Enable undoes Disable.
func (a *Admin) Enable(ctx context.Context, job, server string) error {
	return a.serverAction(ctx, "enable", job, server, layout.NDisabled, false)
}

// Shutdown stops the job on server (or all servers) until it is restarted.
func (a *Admin) Shutdown(ctx context.Context, job, server string) error {
	return a.serverAction(ctx, "shutdown", job, server, layout.NShutdown, true)
}

// serverAction is the action that sets or clears flag on server (or
// every server of job).
func (a *Admin) serverAction(ctx context.Context, action, job, server, flag string, on bool) error {
	return a.act(ctx, Action{Job: job, Action: action, Server: server}, func(p layout.JobPaths) error {
		return a.setServerFlag(ctx, p, job, server, flag, on)
	})
}

// DisableItem keeps a shard item from running on any server. item must be
// in 0..shardingTotalCount-1 of the job's current config (else ErrNoItem).
func (a *Admin) DisableItem(ctx context.Context, job string, item int) error {
	return a.itemAction(ctx, "disable", job, item, true)
}

// EnableItem undoes DisableItem; the same item check applies.
func (a *Admin) EnableItem(ctx context.Context, job string, item int) error {
	return a.itemAction(ctx, "enable", job, item, false)
}

// itemAction is the action that disables (on) or enables an item.
func (a *Admin) itemAction(ctx context.Context, action, job string, item int, on bool) error {
	return a.act(ctx, Action{Job: job, Action: action, Item: &item}, func(p layout.JobPaths) error {
		return a.setItemDisabled(ctx, p, job, item, on)
	})
}

// Remove deletes an offline server's node, or the whole job when server is "".
// A live server or job refuses with an error saying to shut it down first.
// Removing a whole job removes its audit log with it, so that removal is
// not recorded.
func (a *Admin) Remove(ctx context.Context, job, server string) error {
	remove := func(p layout.JobPaths) error { return a.remove(ctx, p, job, server) }
	if server == "" {
		p, err := a.requireJob(ctx, job)
		if err != nil {
			return err
		}
		return remove(p)
	}
	return a.act(ctx, Action{Job: job, Action: "remove", Server: server}, remove)
}

// SetConfig validates and writes one config field, named as in the config
// node ("cron", "shardingTotalCount", "failover", ...). A value that does
// not validate is refused with a *jobconfig.FieldError and nothing is
// written; an operator's explicit 0 is refused for the counts whose 0 means
// "default" in a program's config (fetchDataCount, ...). Lowering
// shardingTotalCount removes the execution nodes of the items beyond it.
func (a *Admin) SetConfig(ctx context.Context, job, field, value string) error {
	return a.act(ctx, Action{Job: job, Action: "config set", Field: field, Value: value}, func(p layout.JobPaths) error {
		return a.setConfig(ctx, p, job, field, value)
	})
}

// act does one operator action on an existing job (else ErrNoJob): do, on
// the job's paths, recorded in the job's audit log when it succeeds.
func (a *Admin) act(ctx context.Context, act Action, do func(layout.JobPaths) error) error {
	return a.audited(ctx, act, func() error {
		p, err := a.requireJob(ctx, act.Job)
		if err != nil {
			return err
		}
		return do(p)
	})
}
