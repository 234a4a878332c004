package dataflow

import (
	"context"
	"fmt"

	"github.com/shardflow/shardflow/history"
)

// Source is the history source of a run started for r: cron fires are
// normal runs, triggers manual ones.
func (r Reason) Source() history.Source {
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
// item, the run and item metrics. rctx is the run's context: when it was
// cancelled before the pipeline ended, items without an error of their own
// record why.
func (n *Node) report(rctx context.Context, h *hostedJob, info RunInfo, res RunResult, cancelled bool) {
	src := info.Reason.Source()
	n.logger.Info("dataflow: run", "job", h.name, "items", info.Items, "source", string(src),
		"success", res.Success, "failure", res.Failure, "duration", res.Duration, "err", res.Err)

	if n.cfg.History != nil && len(res.Items) > 0 {
		recs := make([]history.Record, len(res.Items))
		for i, it := range res.Items {
			rec := history.Record{Job: h.name, Server: info.ServerID, Item: it.Item, Epoch: it.Epoch, Source: src,
				Begin: it.Started, End: it.Started.Add(it.Duration), Success: it.Success, Failure: it.Failure}
			if it.Failover {
				rec.Source = history.SourceFailover
			}
			switch {
			case it.Err != nil:
				rec.Error = it.Err.Error()
			case cancelled:
				rec.Error = fmt.Sprintf("run cancelled: %v", context.Cause(rctx))
			}
			recs[i] = rec
		}
		n.cfg.History.Record(recs...)
	}
	if n.metrics != nil {
		n.metrics.ObserveRun(h.name, res.Duration, res.Err)
		for _, it := range res.Items {
			ok := it.Err == nil && it.Failure == 0 && !cancelled
			n.metrics.ObserveItem(h.name, it.Item, it.Started.Add(it.Duration), ok)
		}
	}
}
