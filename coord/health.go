package coord

import (
	"fmt"

	"github.com/shardflow/shardflow/coord/internal/layout"
)

// health sums a job's status up (JobStatus.Health) and says why.
func health(st JobStatus) (string, []string) {
	reasons := []string{}
	failing := false
	if st.ConfigError != "" {
		failing = true
		reasons = append(reasons, "stored config invalid: "+st.ConfigError)
	}
	for _, it := range st.Items {
		if it.ConsecutiveFailures > 0 {
			failing = true
			reasons = append(reasons, fmt.Sprintf("item %d failing for %d runs on %s: %s", it.Item, it.ConsecutiveFailures, it.FailingOn, it.LastError))
		}
	}
	online, paused := 0, 0
	for _, s := range st.Servers {
		if s.Status != layout.StatusOffline {
			online++
			if s.Paused {
				paused++
			}
		}
	}
	switch {
	case online == 0:
		reasons = append(reasons, "no server is online: no item runs")
	case paused == online:
		reasons = append(reasons, "paused on every online server")
	case paused > 0:
		reasons = append(reasons, fmt.Sprintf("paused on %d of %d online servers", paused, online))
	}
	for _, s := range st.Servers {
		if s.LastError != "" {
			// A source backing off a failing statement, a refused Begin:
			// the server's items make no progress.
			failing = true
			reasons = append(reasons, fmt.Sprintf("server %s reports: %s", s.ID, s.LastError))
		}
	}
	for _, r := range st.Refused {
		reasons = append(reasons, fmt.Sprintf("server %s refuses the job: %s", r.ID, r.Reason))
	}
	for _, it := range st.Items {
		if it.FailoverLost != "" {
			reasons = append(reasons, fmt.Sprintf("item %d: the failover claim of %s ended with its session", it.Item, it.FailoverLost))
		}
	}
	switch {
	case failing:
		return HealthFailing, reasons
	case len(reasons) > 0:
		return HealthDegraded, reasons
	}
	return HealthOK, reasons
}
