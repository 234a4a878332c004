// Package workflow is shardflow's workflows: jobs that run after other jobs
// (jobconfig.Config.DependsOn), once per workflow run, after every shard item
// of every upstream job completed in that workflow run on every server. It
// is a layer on coord/store: its state is nodes of its own under each job
// (workflow/...), and it reaches into the job protocol's layout at one
// point only, the servers' trigger nodes it writes to start a step
// (triggerPaths). docs/workflows.md states the semantics and guarantees.
//
// This file is the graph: dependsOn's checks against the namespace (an
// unknown job, a cycle, two first jobs) and the reverse links
// (workflow/dependents/{job} under each upstream) that let a job find the
// jobs after it without reading the whole namespace.
package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/coord/store"
)

// Node names under a job. The job protocol's own nodes are config and
// servers/{id}/trigger (read and written as the protocol's Admin does).
const (
	nConfig     = "config"
	nServers    = "servers"
	nTrigger    = "trigger"
	nWorkflow   = "workflow"
	nDependents = "dependents"
)

func jobPath(ns, job string, rel ...string) string {
	return store.Join(append([]string{ns, job}, rel...)...)
}

// exists reports whether job is stored in ns (its config node exists).
func exists(ctx context.Context, st store.Store, ns, job string) (bool, error) {
	ok, _, err := st.Exists(ctx, jobPath(ns, job, nConfig))
	if err != nil {
		return false, fmt.Errorf("workflow: read %s: %w", jobPath(ns, job, nConfig), err)
	}
	return ok, nil
}

// readDependsOn reads a stored job's dependsOn (nil for none or an
// unknown job).
func readDependsOn(ctx context.Context, st store.Store, ns, job string) ([]string, error) {
	data, _, err := st.Get(ctx, jobPath(ns, job, nConfig, jobconfig.FieldDependsOn))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: read %s: %w", jobPath(ns, job, nConfig, jobconfig.FieldDependsOn), err)
	}
	return jobconfig.ParseList(string(data)), nil
}

// dependents returns the jobs stored with job in their dependsOn: the
// links under job, each confirmed by the dependent's dependsOn (a link
// outlives an edit that a writer could not finish; it is ignored then).
func dependents(ctx context.Context, st store.Store, ns, job string) ([]string, error) {
	names, _, err := st.Children(ctx, jobPath(ns, job, nWorkflow, nDependents))
	if errors.Is(err, store.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: list %s: %w", jobPath(ns, job, nWorkflow, nDependents), err)
	}
	var out []string
	for _, d := range names {
		ups, err := readDependsOn(ctx, st, ns, d)
		if err != nil {
			return nil, err
		}
		if slices.Contains(ups, job) {
			out = append(out, d)
		}
	}
	return out, nil
}

// graph is the part of a namespace's dependsOn graph around one job: the
// upstream lists of every job read so far.
type graph struct {
	st   store.Store
	ns   string
	deps map[string][]string
}

func (g *graph) upstreams(ctx context.Context, job string) ([]string, error) {
	if ups, ok := g.deps[job]; ok {
		return ups, nil
	}
	ups, err := readDependsOn(ctx, g.st, g.ns, job)
	if err != nil {
		return nil, err
	}
	g.deps[job] = ups
	return ups, nil
}

// CheckDependsOn checks job's dependsOn against the jobs stored in
// namespace ns, as it would be once dependsOn is stored: every named job
// exists, no cycle (the error names it: "a -> b -> a", each job depending
// on the next), and every job of the graph reaches at most one first job
// (a job that depends on nothing: its fires start the workflow runs). The
// error is a *jobconfig.FieldError on dependsOn, wrapping
// jobconfig.ErrInvalid, or a store error.
func CheckDependsOn(ctx context.Context, st store.Store, ns, job string, dependsOn []string) error {
	fix := func(format string, args ...any) error {
		return &jobconfig.FieldError{Field: jobconfig.FieldDependsOn, Problem: fmt.Sprintf(format, args...),
			Fix: "name jobs of this namespace that do not already run after " + job}
	}
	for _, up := range dependsOn {
		ok, err := exists(ctx, st, ns, up)
		if err != nil {
			return err
		}
		if !ok {
			return &jobconfig.FieldError{Field: jobconfig.FieldDependsOn,
				Problem: fmt.Sprintf("names %s, which is not a job of namespace %q", up, ns),
				Fix:     "store " + up + " first (`shardflow job add`, or add it to the Node before this job)"}
		}
	}
	g := &graph{st: st, ns: ns, deps: map[string][]string{job: dependsOn}}
	if cycle, err := g.cycleThrough(ctx, job); err != nil {
		return err
	} else if cycle != nil {
		return fix("makes a cycle: %s (each job depends on the next)", strings.Join(cycle, " -> "))
	}
	// The jobs whose first jobs the edit may change: job and every job
	// after it.
	affected := []string{job}
	seen := map[string]bool{job: true}
	for i := 0; i < len(affected); i++ {
		ds, err := dependents(ctx, st, ns, affected[i])
		if err != nil {
			return err
		}
		for _, d := range ds {
			if !seen[d] {
				seen[d] = true
				affected = append(affected, d)
			}
		}
	}
	roots := map[string][]string{}
	for _, j := range affected {
		rs, err := g.roots(ctx, j, roots, map[string]bool{})
		if err != nil {
			return err
		}
		if len(rs) > 1 {
			return fix("would make %s run after two first jobs, %s and %s (jobs that depend on nothing): a workflow starts from one job; make one of them depend on the other",
				j, rs[0], rs[1])
		}
	}
	return nil
}

// cycleThrough returns a cycle through job in the dependsOn graph, job
// first and last, or nil.
func (g *graph) cycleThrough(ctx context.Context, job string) ([]string, error) {
	var path []string
	visited := map[string]bool{}
	var walk func(j string) (bool, error)
	walk = func(j string) (bool, error) {
		path = append(path, j)
		ups, err := g.upstreams(ctx, j)
		if err != nil {
			return false, err
		}
		for _, up := range ups {
			if up == job {
				path = append(path, job)
				return true, nil
			}
			if visited[up] {
				continue
			}
			visited[up] = true
			if found, err := walk(up); found || err != nil {
				return found, err
			}
		}
		path = path[:len(path)-1]
		return false, nil
	}
	found, err := walk(job)
	if !found || err != nil {
		return nil, err
	}
	return path, nil
}

// roots returns the first jobs job runs after (itself when it depends on
// nothing), sorted. The graph is acyclic around job (cycleThrough);
// onPath stops a cycle elsewhere in a stored graph.
func (g *graph) roots(ctx context.Context, job string, memo map[string][]string, onPath map[string]bool) ([]string, error) {
	if rs, ok := memo[job]; ok {
		return rs, nil
	}
	if onPath[job] {
		return nil, nil
	}
	onPath[job] = true
	defer delete(onPath, job)
	ups, err := g.upstreams(ctx, job)
	if err != nil {
		return nil, err
	}
	if len(ups) == 0 {
		memo[job] = []string{job}
		return memo[job], nil
	}
	var out []string
	for _, up := range ups {
		rs, err := g.roots(ctx, up, memo, onPath)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	slices.Sort(out)
	memo[job] = out
	return out, nil
}

// Link records job's dependsOn in the reverse links: a link
// workflow/dependents/{job} under every job in now, and none under the
// jobs of before that are not in now. Call it after the dependsOn is
// stored (a link left by a failed call is ignored: dependents confirms
// each link by the dependent's dependsOn).
func Link(ctx context.Context, st store.Store, ns, job string, before, now []string) error {
	for _, up := range now {
		p := jobPath(ns, up, nWorkflow, nDependents, job)
		if err := store.CreateAll(ctx, st, p); err != nil {
			return fmt.Errorf("workflow: link %s: %w", p, err)
		}
	}
	for _, up := range before {
		if slices.Contains(now, up) {
			continue
		}
		p := jobPath(ns, up, nWorkflow, nDependents, job)
		if err := st.Delete(ctx, p, store.AnyVersion); err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("workflow: unlink %s: %w", p, err)
		}
	}
	return nil
}
