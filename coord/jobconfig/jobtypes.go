package jobconfig

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/shardflow/shardflow/internal/redact"
)

// JobType is the kind of a job, stored in its jobType config node.
type JobType string

// Job types, named as ElasticJob stores them.
const (
	// JobTypeDataflow: Fetch then Process per fetched item (the default).
	JobTypeDataflow JobType = "DATAFLOW"
	// JobTypeSimple: one call of a function per owned item per trigger.
	JobTypeSimple JobType = "SIMPLE"
	// JobTypeScript: Script.CommandLine runs once per owned item per trigger.
	JobTypeScript JobType = "SCRIPT"
	// JobTypeHTTP: one request to HTTP.URL per owned item per trigger.
	JobTypeHTTP JobType = "HTTP"
)

// DefaultHTTPMethod is HTTP.Method's default for HTTP jobs.
const DefaultHTTPMethod = http.MethodPost

// JobTypes lists the job types shardflow runs.
func JobTypes() []JobType {
	return []JobType{JobTypeDataflow, JobTypeSimple, JobTypeScript, JobTypeHTTP}
}

// Type returns c.JobType with its default applied.
func (c Config) Type() JobType {
	if c.JobType == "" {
		return JobTypeDataflow
	}
	return c.JobType
}

// Stored reports whether jobs of type t run without code: a `shardflow
// serve` worker (or a Node opted in to stored jobs) runs them from their
// stored config alone.
func (t JobType) Stored() bool { return t == JobTypeScript || t == JobTypeHTTP }

// ParseJobType reads a jobType node's text; surrounding space is ignored.
func ParseJobType(text string) (JobType, bool) {
	t := JobType(strings.TrimSpace(text))
	for _, k := range JobTypes() {
		if t == k {
			return t, true
		}
	}
	return t, false
}

func jobTypeNames() string {
	var names []string
	for _, t := range JobTypes() {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}

// validateJobType checks the fields of c's job type (c has its defaults).
func (c Config) validateJobType() []error {
	var errs []error
	if _, ok := ParseJobType(string(c.JobType)); !ok {
		return []error{fieldErr(FieldJobType, "use one of "+jobTypeNames(), "%q is not a job type", c.JobType)}
	}
	if c.StreamingProcess && c.JobType != JobTypeDataflow {
		errs = append(errs, fieldErr(FieldStreamingProcess, "set it to false: only DATAFLOW jobs fetch in a loop",
			"is true for a %s job", c.JobType))
	}
	if c.ItemTimeout < 0 {
		errs = append(errs, fieldErr(FieldItemTimeout, `give a duration such as "30s", or 0 for no limit`, "must be >= 0, got %s", c.ItemTimeout))
	}
	switch c.JobType {
	case JobTypeScript:
		if _, err := SplitCommandLine(c.Script.CommandLine); err != nil {
			errs = append(errs, err)
		}
	case JobTypeHTTP:
		if err := ValidateHTTPURL(c.HTTP.URL); err != nil {
			errs = append(errs, err)
		}
		if !validToken(c.HTTP.Method) {
			errs = append(errs, fieldErr(FieldHTTPMethod, `use a method such as "POST" or "GET"`, "%q is not an HTTP method", c.HTTP.Method))
		}
		if _, err := ParseHTTPHeaders(c.HTTP.Headers); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// ValidateHTTPURL checks an HTTP job's URL: absolute, http or https, with a
// host. The error wraps ErrInvalid and names httpUrl.
func ValidateHTTPURL(raw string) error {
	const fix = `give an absolute URL such as "https://jobs.internal/run"`
	if strings.TrimSpace(raw) == "" {
		return fieldErr(FieldHTTPURL, fix, "is empty; an HTTP job needs one")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fieldErr(FieldHTTPURL, fix, "%q does not parse", redact.URL(raw))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldErr(FieldHTTPURL, fix, "%q is not an absolute http:// or https:// URL", redact.URL(raw))
	}
	return nil
}

// ParseHTTPHeaders parses HTTP.Headers: one "Name: value" per line, blank
// lines skipped. The error wraps ErrInvalid and names httpHeaders.
func ParseHTTPHeaders(text string) (http.Header, error) {
	const fix = `write one "Name: value" per line, e.g. "Authorization: Bearer T"`
	h := http.Header{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || !validToken(name) {
			// The line may be a secret pasted without its name: not quoted.
			return nil, fieldErr(FieldHTTPHeaders, fix, "line %d is not a header", i+1)
		}
		if strings.ContainsAny(value, "\r\x00") {
			return nil, fieldErr(FieldHTTPHeaders, fix, "line %d has a control character in its value", i+1)
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return h, nil
}

// validToken reports whether s is an RFC 9110 token (method, header name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return true
}

// SplitCommandLine splits a SCRIPT job's command line into words as a POSIX
// shell splits them, without expanding anything: words are separated by
// blanks; single quotes keep everything literally; double quotes keep
// everything but a backslash before ", \, $ or `; a backslash outside
// quotes escapes the next character. No variables, globs, pipes or
// redirections: to use those, name a shell ("sh -c '...'"). The error
// wraps ErrInvalid and names scriptCommandLine.
func SplitCommandLine(line string) ([]string, error) {
	const fix = `write the command as words, quoting spaces: "/opt/jobs/sync --region 'eu west'"`
	var (
		words []string
		cur   strings.Builder
		in    bool // a word is open (an empty quoted word counts)
	)
	for i := 0; i < len(line); i++ {
		b := line[i]
		switch {
		case b == ' ' || b == '\t' || b == '\n' || b == '\r':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case b == '\\':
			if i+1 >= len(line) {
				return nil, fieldErr(FieldScriptCommandLine, fix, "ends with a lone backslash")
			}
			i++
			cur.WriteByte(line[i])
			in = true
		case b == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fieldErr(FieldScriptCommandLine, fix, "has an unterminated single quote at byte %d", i)
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			in = true
		case b == '"':
			j := i + 1
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) && strings.IndexByte("\"\\$`", line[j+1]) >= 0 {
					j++
				}
				cur.WriteByte(line[j])
			}
			if j >= len(line) {
				return nil, fieldErr(FieldScriptCommandLine, fix, "has an unterminated double quote at byte %d", i)
			}
			i = j
			in = true
		default:
			cur.WriteByte(b)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, fieldErr(FieldScriptCommandLine, fix, "is empty; a SCRIPT job needs a command")
	}
	return words, nil
}

// jobTypeProblem is FromFields' complaint about a stored jobType.
func jobTypeProblem(job, text string) string {
	return fmt.Sprintf("job %q is registered as a %q job, which is not one of %s", job, text, jobTypeNames())
}
