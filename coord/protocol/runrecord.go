package protocol

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/protocol/internal/jobnodes"
	"github.com/shardflow/shardflow/coord/store"
)

// layoutGuard refuses a Begin while an online server of the job runs an
// older layout (its record is absent or has no "layout":2; every server of
// this layout writes one when it registers): servers of the two layouts
// would not see each other's runs, and items would run twice. The upgrade
// stops every server of a job first (docs/operations.md). The records are
// read only when the set of online servers changed since the guard last
// passed (none per trigger).
func (j *Job) layoutGuard(ctx context.Context) error {
	var online []string
	for _, s := range j.cache.Children(layout.NServers) {
		if jobnodes.CachedServerState(j.cache, s).Online {
			online = append(online, s)
		}
	}
	key := strings.Join(online, ",")
	j.mu.Lock()
	passed := j.layoutOK == key
	j.mu.Unlock()
	if passed {
		return nil
	}
	for _, s := range online {
		if s == j.id {
			continue
		}
		data, _, err := j.st.Get(ctx, j.p.Server(s, layout.NRun))
		if err != nil && !errors.Is(err, store.ErrNoNode) {
			return fmt.Errorf("coord: job %q: read %s: %w", j.jname, j.p.Server(s, layout.NRun), err)
		}
		var rec layout.RunRecord
		if err == nil {
			rec, _ = layout.DecodeRunRecord(data)
		}
		if err != nil || rec.Layout < layout.RecordLayout {
			if gone, _, xerr := j.st.Exists(ctx, j.p.Server(s, layout.NStatus)); xerr == nil && !gone {
				continue // went offline meanwhile
			}
			e := fmt.Errorf("%w: job %q: server %q runs an older release (its %s has no \"layout\":%d): stop every server of the job before upgrading (docs/operations.md)",
				ErrBadConfig, j.jname, s, j.p.Server(s, layout.NRun), layout.RecordLayout)
			j.recordLastError(ctx, e.Error())
			return e
		}
	}
	j.mu.Lock()
	j.layoutOK = key
	j.mu.Unlock()
	return nil
}
