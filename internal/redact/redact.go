// Package redact hides secrets in what shardflow shows: URL query strings
// and user-info passwords, HTTP header values, DSN passwords and known
// secret values in free text (error messages, script output). Every view
// (the console, its APIs, the CLI, the audit log, history and logs) shows
// data that went through it, so a secret stored in a job's config or
// echoed by a failing endpoint is never displayed.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mark is what a redacted secret is replaced with.
const Mark = "REDACTED"

// URL returns raw with its user-info password and every query value
// replaced by Mark (the parameter names stay, so an operator can tell
// which URL it is). Text that does not parse as a URL keeps only what
// precedes a '?' or '@'.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return cutAt(raw)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mark)
		}
	}
	if u.RawQuery != "" {
		u.RawQuery = redactQuery(u.RawQuery)
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = Mark, ""
	}
	return u.String()
}

// cutAt keeps what precedes the first '?' or '@' of an unparsable URL.
func cutAt(raw string) string {
	if i := strings.IndexAny(raw, "?@#"); i >= 0 {
		return raw[:i] + "?" + Mark
	}
	return raw
}

// redactQuery keeps a query's parameter names and hides their values.
func redactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		name, _, _ := strings.Cut(p, "=")
		if name == "" {
			parts[i] = Mark
			continue
		}
		parts[i] = name + "=" + Mark
	}
	return strings.Join(parts, "&")
}

// urlInText finds URLs with a scheme in free text: up to a blank, a quote
// or an angle bracket.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://[^\s"'<>\x60]+`)

// keywordSecret finds key=value secrets of DSNs and command lines
// (password=..., sslpassword=..., token=...), also with ':' and JSON quotes.
var keywordSecret = regexp.MustCompile(`(?i)((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)["']?\s*[=:]\s*["']?)([^\s"'&,;]+)`)

// authHeader finds an Authorization header's credentials in text.
var authHeader = regexp.MustCompile(`(?i)((?:authorization|proxy-authorization)["']?\s*:\s*["']?(?:[A-Za-z]+\s+)?)([^\s"',;]+)`)

// Text returns s with every URL in it redacted (URL), key=value secrets
// (password=, token=, api_key=, ...) and Authorization header credentials
// replaced by Mark, and every one of values (secrets known to the caller:
// resolved header values, say) replaced by Mark. Values shorter than 4
// bytes are ignored: hiding them would garble the text without protecting
// anything.
func Text(s string, values ...string) string {
	for _, v := range values {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, Mark)
		}
	}
	s = urlInText.ReplaceAllStringFunc(s, URL)
	s = keywordSecret.ReplaceAllString(s, "${1}"+Mark)
	return authHeader.ReplaceAllString(s, "${1}"+Mark)
}
