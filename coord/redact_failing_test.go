package coord

import (
	"strings"
	"testing"

	"github.com/shardflow/shardflow/coord/jobconfig"
)

// A secret echoed into a failing item's error is hidden in the item's
// lastError and in the job's health reasons, as in the servers' errors.
func TestRedactStatusHidesSecretsInItemErrors(t *testing.T) {
	const secret = "s3cr3t-token-value"
	st := JobStatus{
		Config:        map[string]string{jobconfig.FieldHTTPHeaders: "Authorization: Bearer " + secret},
		Items:         []ItemStatus{{Item: 0, ConsecutiveFailures: 1, LastError: "GET failed with Bearer " + secret}},
		HealthReasons: []string{"item 0 failing for 1 runs on a: GET failed with Bearer " + secret},
	}
	redactStatus(&st)
	if strings.Contains(st.Items[0].LastError, secret) || strings.Contains(st.HealthReasons[0], secret) {
		t.Fatalf("secret shown: item error %q, health reasons %q", st.Items[0].LastError, st.HealthReasons)
	}
}
