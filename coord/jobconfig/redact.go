package jobconfig

import (
	"maps"
	"regexp"
	"strings"

	"github.com/shardflow/shardflow/internal/redact"
)

// secretFields are the config fields that may hold secrets, and how a view
// shows each: an HTTP job's header values (Authorization, API keys) and its
// URL's query string and user-info password.
var secretFields = map[string]func(string) string{
	FieldHTTPHeaders: RedactHTTPHeaders,
	FieldHTTPURL:     redact.URL,
}

// IsSecretField reports whether the config field name may hold a secret,
// so that views show it only through RedactField.
func IsSecretField(name string) bool { _, ok := secretFields[name]; return ok }

// RedactField returns a field's value as every view shows it: a secret
// field's secrets replaced by "REDACTED", any other field verbatim.
func RedactField(name, value string) string {
	if f, ok := secretFields[name]; ok {
		return f(value)
	}
	return value
}

// RedactFields returns a copy of a config node's fields (Fields, or as
// stored) with every secret field redacted (RedactField).
func RedactFields(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for name, f := range secretFields {
		if v, ok := out[name]; ok {
			out[name] = f(v)
		}
	}
	return out
}

// secretRef matches a secret reference in a header value: ${env:NAME} or
// ${file:NAME}, resolved by the worker that runs the job (ResolveSecretRefs
// in package jobs) from its own environment or secret directory, so the
// secret itself is never stored in the coordination service.
var secretRef = regexp.MustCompile(`\$\{(env|file):([A-Za-z0-9_.\-]+)\}`)

// SecretRefs returns the references (${env:NAME}, ${file:NAME}) in text,
// as [kind, name] pairs.
func SecretRefs(text string) [][2]string {
	var refs [][2]string
	for _, m := range secretRef.FindAllStringSubmatch(text, -1) {
		refs = append(refs, [2]string{m[1], m[2]})
	}
	return refs
}

// ReplaceSecretRefs returns text with each reference replaced by what
// resolve returns for it, or the first error.
func ReplaceSecretRefs(text string, resolve func(kind, name string) (string, error)) (string, error) {
	var firstErr error
	out := secretRef.ReplaceAllStringFunc(text, func(ref string) string {
		m := secretRef.FindStringSubmatch(ref)
		v, err := resolve(m[1], m[2])
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return v
	})
	return out, firstErr
}

// RedactHTTPHeaders shows an httpHeaders value with every header value
// replaced by "REDACTED", except a value made only of secret references
// (with at most an auth scheme word before them, "Bearer ${env:API_TOKEN}"),
// which holds no secret and is shown as is. A line that is not a header is
// redacted whole.
func RedactHTTPHeaders(text string) string {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			continue
		}
		name, value, ok := strings.Cut(trimmed, ":")
		if !ok || !validToken(strings.TrimSpace(name)) {
			lines[i] = redact.Mark
			continue
		}
		value = strings.TrimSpace(value)
		if onlyRefs(value) {
			lines[i] = strings.TrimSpace(name) + ": " + value
			continue
		}
		lines[i] = strings.TrimSpace(name) + ": " + redact.Mark
	}
	return strings.Join(lines, "\n")
}

// onlyRefs reports whether a header value holds no literal secret: one or
// more references, optionally after one word of letters (an auth scheme).
func onlyRefs(value string) bool {
	if !secretRef.MatchString(value) {
		return false
	}
	rest := strings.Fields(secretRef.ReplaceAllString(value, " "))
	if len(rest) == 0 {
		return true
	}
	if len(rest) > 1 || !strings.HasPrefix(value, rest[0]) {
		return false
	}
	for _, r := range rest[0] {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return false
		}
	}
	return true
}
