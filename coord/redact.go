package coord

import (
	"net/url"
	"strings"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/internal/redact"
)

// redactStatus hides the job's secrets in a status read, the one model
// every view shows (the console's pages and APIs, `status`, `config get`,
// `job list`): secret config fields through jobconfig.RedactFields, and
// every free text (config error, servers' and items' last errors, health
// reasons, refusal reasons, audit values) through redact.Text with the stored secrets' values, so a
// secret echoed into an error message is hidden too.
func redactStatus(st *JobStatus) {
	secrets := secretValues(st.Config)
	st.Config = jobconfig.RedactFields(st.Config)
	st.ConfigError = redact.Text(st.ConfigError, secrets...)
	for i := range st.Servers {
		st.Servers[i].LastError = redact.Text(st.Servers[i].LastError, secrets...)
	}
	for i := range st.Refused {
		st.Refused[i].Reason = redact.Text(st.Refused[i].Reason, secrets...)
	}
	for i := range st.Items {
		st.Items[i].LastError = redact.Text(st.Items[i].LastError, secrets...)
	}
	for i := range st.HealthReasons {
		st.HealthReasons[i] = redact.Text(st.HealthReasons[i], secrets...)
	}
	for i := range st.Actions {
		redactAction(&st.Actions[i], secrets...)
	}
}

// redactAction hides a secret field's value in an audit entry (entries
// recorded before redaction existed, too).
func redactAction(act *Action, secrets ...string) {
	if act.Field != "" {
		act.Value = redact.Text(jobconfig.RedactField(act.Field, act.Value), secrets...)
	}
	act.Detail = redact.Text(act.Detail, secrets...)
}

// secretValues returns the literal secrets of stored config fields: the
// header values and the URL's query values and password.
func secretValues(fields map[string]string) []string {
	var out []string
	for _, line := range strings.Split(fields[jobconfig.FieldHTTPHeaders], "\n") {
		if _, v, ok := strings.Cut(line, ":"); ok {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
				// The credentials after a scheme word, alone too.
				if _, cred, ok := strings.Cut(v, " "); ok {
					out = append(out, strings.TrimSpace(cred))
				}
			}
		}
	}
	if u, err := url.Parse(fields[jobconfig.FieldHTTPURL]); err == nil {
		for _, vs := range u.Query() {
			out = append(out, vs...)
		}
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				out = append(out, p)
			}
		}
	}
	return out
}
