package jobs

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/internal/redact"
)

// ErrNotAllowed: a stored job's command or URL is not in this worker's
// allow-list, so the worker does not run it.
var ErrNotAllowed = errors.New("jobs: not allowed on this worker")

// AllowList says which stored commands and URLs a worker may run. The zero
// value allows nothing.
//
// A command prefix is split into words like a command line; a command is
// allowed when its first words equal the prefix's words, except that a last
// prefix word ending in "/" (a directory) matches any word under it whose
// cleaned path stays under it. So "/opt/jobs/" allows "/opt/jobs/sync
// --full" but not "/opt/jobs/../bin/sh"; "/usr/bin/rsync -a" allows
// "/usr/bin/rsync -a src dst" but not "/usr/bin/rsync --delete". Give
// absolute paths: a bare name is looked up in the worker's PATH.
//
// A URL prefix allows URLs with the same scheme and host (port included)
// whose path is the prefix's path or below it at a "/" boundary; the query
// is free. URLs with user info or ".." path segments are refused.
type AllowList struct {
	commands [][]string
	urls     []*url.URL
}

// NewAllowList parses the prefixes, or names the first bad one.
func NewAllowList(commands, urls []string) (*AllowList, error) {
	a := &AllowList{}
	for _, c := range commands {
		words, err := jobconfig.SplitCommandLine(c)
		if err != nil {
			return nil, fmt.Errorf("jobs: allowed command %q: %w", c, err)
		}
		a.commands = append(a.commands, words)
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("jobs: allowed URL %q: give an absolute http:// or https:// URL prefix, e.g. https://jobs.internal/run/", raw)
		}
		a.urls = append(a.urls, u)
	}
	return a, nil
}

// Empty reports whether a allows nothing.
func (a *AllowList) Empty() bool { return a == nil || len(a.commands) == 0 && len(a.urls) == 0 }

// CheckCommand returns nil if argv is allowed, else an error wrapping
// ErrNotAllowed that names the command.
func (a *AllowList) CheckCommand(argv []string) error {
	if a != nil {
		for _, p := range a.commands {
			if commandMatches(p, argv) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: command %q matches no --allow-command prefix; start the worker with one that covers it", ErrNotAllowed, strings.Join(argv, " "))
}

func commandMatches(prefix, argv []string) bool {
	if len(argv) < len(prefix) {
		return false
	}
	last := len(prefix) - 1
	for i, w := range prefix[:last] {
		if argv[i] != w {
			return false
		}
	}
	p, w := prefix[last], argv[last]
	if !strings.HasSuffix(p, "/") {
		return w == p
	}
	if !strings.HasPrefix(w, p) {
		return false
	}
	return strings.HasPrefix(path.Clean(w), p) && path.Clean(w) != path.Clean(p)
}

// CheckURL returns nil if raw is allowed, else an error wrapping
// ErrNotAllowed that names the URL.
func (a *AllowList) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err == nil && a != nil && u.User == nil && !hasDotDot(u.Path) {
		for _, p := range a.urls {
			if urlMatches(p, u) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: URL %q matches no --allow-url prefix; start the worker with one that covers it", ErrNotAllowed, redact.URL(raw))
}

func urlMatches(p, u *url.URL) bool {
	if !strings.EqualFold(p.Scheme, u.Scheme) || !strings.EqualFold(p.Host, u.Host) {
		return false
	}
	pp := strings.TrimSuffix(p.Path, "/")
	return pp == "" || u.Path == pp || strings.HasPrefix(u.Path, pp+"/")
}

func hasDotDot(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}
