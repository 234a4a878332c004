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

// MaxAuditEntries bounds a job's audit log: older entries are dropped.
const MaxAuditEntries = 50

// Action is one operator action in a job's audit log.
type Action struct {
	// Time is when the action was done (the acting process's clock).
	Time time.Time `json:"time"`
	// Actor is who did it (Admin.As).
	Actor string `json:"actor"`
	Job   string `json:"-"`
	// Action is "trigger", "pause", "resume", "disable", "enable",
	// "shutdown", "remove", "config set", "create" (CreateJob), or on a
	// workflow run "workflow rerun", "workflow mark-success", "workflow
	// skip" or "workflow cancel".
	Action string `json:"action"`
	// Server is the server acted on; "" for every server.
	Server string `json:"server"`
	// Item is the shard item of an item disable/enable; null otherwise.
	Item *int `json:"item"`
	// Field and Value are the config field and its new text of a config set.
	Field string `json:"field,omitempty"`
	Value string `json:"value,omitempty"`
	// Detail says what a create stored (the job's type, items, schedule
	// and command or URL), or a workflow action's workflow run and what
	// it did.
	Detail string `json:"detail,omitempty"`
}

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
func (a *Admin) audited(ctx context.Context, act Action, do func() error) error {
	if err := do(); err != nil {
		return err
	}
	act.Actor, act.Time = a.actor, time.Now()
	redactAction(&act) // a secret set with `config set` is never kept in the log
	if err := a.record(ctx, act); err != nil {
		return fmt.Errorf("coord: %s done, but not recorded in the audit log: %w", act.Action, err)
	}
	return nil
}

// record prepends act to the job's audit log with a version-checked write,
// so concurrent recorders do not lose each other's entries.
func (a *tree) record(ctx context.Context, act Action) error {
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
func (a *tree) audit(ctx context.Context, p layout.JobPaths, job string) ([]Action, error) {
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
