package protocol

import (
	"github.com/shardflow/shardflow/coord/store"
)

// Registered reports whether this server is registered for the job on the
// store's current session and that session is connected: the job's status
// node is this session's, so the server is given items and its runs can
// commit. False while the session is suspended or lost, while the job
// re-registers on a new session, after an operator shut the job down on
// this server, after the job was removed, and after Leave. It makes no
// store call (a readiness probe may call it often).
func (j *Job) Registered() bool {
	sess, _ := j.st.Session()
	j.mu.Lock()
	defer j.mu.Unlock()
	return sess.State == store.StateConnected && sess.ID == j.regSession &&
		j.regCtx != nil && j.regCtx.Err() == nil && !j.offline && !j.removed && !j.left
}
