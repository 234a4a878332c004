package dataflow

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/shardflow/shardflow/history"
)

// historySource is the history source of a run started for r: cron fires are
// normal runs, triggers manual ones.
func (r Reason) historySource() history.Source {
	switch r {
	case ReasonMisfire:
		return history.SourceMisfire
	case ReasonFailover:
		return history.SourceFailover
	case ReasonTrigger:
		return history.SourceManual
	}
	return history.SourceNormal
}

// report is the end of every run: one INFO line, one history record per
// item, the run and item metrics.
//
// errs are the run's failed items with their errors (itemErrors), as its
// Complete recorded them: history, metrics and status agree.
func (n *Node) report(h *hostedJob, info RunInfo, res RunResult, errs map[int]string) {
	src := info.Reason.historySource()
	// The line's attributes only for a handler that keeps it: built, they
	// are several allocations per run.
	if n.logger.Enabled(context.Background(), slog.LevelInfo) {
		attrs := []any{"job", h.name, "items", info.Items, "source", string(src),
			"success", res.Success, "failure", res.Failure, "duration", res.Duration, "err", res.Err}
		if info.WorkflowRun != "" {
			attrs = append(attrs, "workflowRun", info.WorkflowRun)
		}
		n.logger.Info("dataflow: run", attrs...)
	}

	if n.cfg.History != nil && len(res.Items) > 0 {
		recs := make([]history.Record, len(res.Items))
		for i, it := range res.Items {
			rec := history.Record{Job: h.name, Server: info.ServerID, Item: it.Item, Epoch: it.Epoch, Source: src,
				Begin: it.Started, End: it.Started.Add(it.Duration), Success: it.Success, Failure: it.Failure,
				WorkflowRun: info.WorkflowRun}
			if it.Failover {
				rec.Source = history.SourceFailover
			}
			rec.Error = errs[it.Item]
			recs[i] = rec
		}
		n.cfg.History.Record(recs...)
	}
	if n.metrics != nil {
		n.metrics.ObserveRun(h.name, res.Duration, res.Err)
		for _, it := range res.Items {
			_, failed := errs[it.Item]
			n.metrics.ObserveItemRun(h.name, it.Item, failed)
			ok := !failed && it.Failure == 0
			n.metrics.ObserveItem(h.name, it.Item, it.Started.Add(it.Duration), ok)
		}
	}
}

// itemErrors are the errors of a run's failed items, by item, for its
// Complete, history and metrics: an item's own error, or, for a run
// cancelled before its pipeline ended (ownership lost, a hard stop), or
// whose Complete failed (completeErr), why.
func itemErrors(rctx context.Context, res RunResult, cancelled bool, completeErr error) map[int]string {
	var out map[int]string
	for _, it := range res.Items {
		var msg string
		switch {
		case it.Err != nil:
			msg = it.Err.Error()
		case cancelled:
			msg = fmt.Sprintf("run cancelled: %v", context.Cause(rctx))
		case completeErr != nil:
			msg = completeErr.Error()
		default:
			continue
		}
		if out == nil {
			out = map[int]string{}
		}
		out[it.Item] = msg
	}
	return out
}
