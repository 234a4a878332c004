package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/shardflow/shardflow/coord/internal/layout"
	"github.com/shardflow/shardflow/coord/store"
)

// nAudit is the job's audit log: one persistent node holding a JSON array
// of Actions, newest first, at most MaxAuditEntries. One node keeps a
// status read to one extra Get.
const nAudit = "audit"

// auditCASRounds bounds the compare-and-set retries of concurrent recorders.
const auditCASRounds = 16

// defaultActor names this process's operator: "user@host".
func defaultActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return name
}

// audited runs act and, when it succeeds, records the action. A failure to
// record is returned (the action itself took effect, as the error says).
func (a *admin) audited(ctx context.Context, actor string, act Action, do func() error) error {
	if err := do(); err != nil {
		return err
	}
	act.Actor, act.Time = actor, time.Now()
	redactAction(&act) // a secret set with `config set` is never kept in the log
	if err := a.record(ctx, act); err != nil {
		return fmt.Errorf("coord: %s done, but not recorded in the audit log: %w", act.Action, err)
	}
	return nil
}

// record prepends act to the job's audit log with a version-checked write,
// so concurrent recorders do not lose each other's entries.
func (a *admin) record(ctx context.Context, act Action) error {
	path := a.paths(act.Job).Abs(nAudit)
	for range auditCASRounds {
		data, st, err := a.st.Get(ctx, path)
		if errors.Is(err, store.ErrNoNode) {
			buf, _ := json.Marshal([]Action{act})
			_, err = a.st.Create(ctx, path, buf, store.Persistent)
			if errors.Is(err, store.ErrNodeExists) {
				continue
			}
			if errors.Is(err, store.ErrNoNode) {
				return nil // the job was removed meanwhile: nothing to record in
			}
			return err
		}
		if err != nil {
			return err
		}
		log := decodeAudit(data)
		log = append([]Action{act}, log...)
		if len(log) > MaxAuditEntries {
			log = log[:MaxAuditEntries]
		}
		buf, _ := json.Marshal(log)
		if _, err = a.st.Set(ctx, path, buf, st.Version); errors.Is(err, store.ErrBadVersion) {
			continue
		}
		return err
	}
	return fmt.Errorf("write %s: %d concurrent updates in a row", path, auditCASRounds)
}

// decodeAudit decodes the audit node; data that does not decode (written
// by hand) reads as an empty log rather than hiding the status.
func decodeAudit(data []byte) []Action {
	var log []Action
	if json.Unmarshal(data, &log) != nil {
		return nil
	}
	return log
}

// audit reads a job's audit log, newest first.
func (a *admin) audit(ctx context.Context, p layout.JobPaths, job string) ([]Action, error) {
	data, _, err := a.st.Get(ctx, p.Abs(nAudit))
	if errors.Is(err, store.ErrNoNode) {
		return []Action{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coord: read %s: %w", p.Abs(nAudit), err)
	}
	log := decodeAudit(data)
	if log == nil {
		log = []Action{}
	}
	for i := range log {
		log[i].Job = job
	}
	return log, nil
}
