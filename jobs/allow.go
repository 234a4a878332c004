package jobs

import (
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/internal/redact"
)

// ErrNotAllowed: a stored job's command or URL is not in this worker's
// allow-list, so the worker does not run it.
var ErrNotAllowed = errors.New("jobs: not allowed on this worker")

// Words of a command entry with a meaning of their own.
const (
	// anyWord matches exactly one argument, whatever it is.
	anyWord = "*"
	// restWords, as an entry's last word, matches any further arguments
	// (none included).
	restWords = "..."
)

// AllowList says which stored commands and URLs a worker may run. The zero
// value allows nothing.
//
// A command entry fixes the whole command line: it is split into words
// like a command line, and a command is allowed when it has as many words
// and each matches: a literal word itself; "*" any one argument; a word
// with "*" inside it a glob over that one argument ("--region=*"); "..." as
// the last word any further arguments. The program (the first word) is
// compared by its real path: both sides are looked up in PATH when bare
// and their symlinks resolved, so "/usr/local/bin/x -> /bin/sh" is /bin/sh.
// A first word ending in "/" (a directory) matches any program whose real
// path is under it. So "/opt/jobs/sync --full" allows exactly that;
// "/opt/jobs/ ..." any program under /opt/jobs with any arguments;
// "/usr/bin/rsync -a * *" rsync with -a and two operands, not "-e CMD".
// The worker runs the real path it checked.
//
// A URL prefix allows URLs with the same scheme and host (port included)
// whose path is the prefix's path or below it at a "/" boundary; the query
// is free. URLs with user info, a ';' or '\' in the path, ".." segments, or
// encoded '.', '/' or '\' in the path (%2e, %2f, %5c: traversal a server
// may decode) are refused.
type AllowList struct {
	commands [][]string
	urls     []*url.URL
}

// NewAllowList parses the entries, or names the first bad one.
func NewAllowList(commands, urls []string) (*AllowList, error) {
	a := &AllowList{}
	for _, c := range commands {
		words, err := jobconfig.SplitCommandLine(c)
		if err != nil {
			return nil, fmt.Errorf("jobs: allowed command %q: %w", c, err)
		}
		for i, w := range words {
			if w == restWords && i != len(words)-1 {
				return nil, fmt.Errorf("jobs: allowed command %q: %q may only be the last word (any further arguments)", c, restWords)
			}
		}
		if strings.Contains(words[0], "*") || words[0] == restWords {
			return nil, fmt.Errorf("jobs: allowed command %q: name the program (or its directory ending in /), not a pattern", c)
		}
		a.commands = append(a.commands, words)
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("jobs: allowed URL %q: give an absolute http:// or https:// URL prefix, e.g. https://jobs.internal/run/", redact.URL(raw))
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
	_, err := a.ResolveCommand(argv)
	return err
}

// ResolveCommand returns the real path of argv's program when argv is
// allowed (run that path: it is what was checked), else an error wrapping
// ErrNotAllowed that names the command.
func (a *AllowList) ResolveCommand(argv []string) (string, error) {
	refuse := func(why string) (string, error) {
		return "", fmt.Errorf("%w: command %q %s; start the worker with an --allow-command entry that covers it (docs/operations.md)",
			ErrNotAllowed, strings.Join(argv, " "), why)
	}
	if len(argv) == 0 {
		return refuse("is empty")
	}
	prog, err := realProgram(argv[0])
	if err != nil {
		return refuse(fmt.Sprintf("names no program this worker can find (%v)", err))
	}
	if a != nil {
		for _, entry := range a.commands {
			if programMatches(entry[0], prog) && argsMatch(entry[1:], argv[1:]) {
				return prog, nil
			}
		}
	}
	return refuse("matches no --allow-command entry (program " + prog + ")")
}

// realProgram is the real path of a program: looked up in PATH when it has
// no slash, made absolute, symlinks resolved.
func realProgram(name string) (string, error) {
	p := name
	if !strings.Contains(name, "/") {
		lp, err := exec.LookPath(name)
		if err != nil {
			return "", err
		}
		p = lp
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// programMatches compares an entry's program (or directory) with a
// program's real path.
func programMatches(entry, prog string) bool {
	if strings.HasSuffix(entry, "/") {
		dir := filepath.Clean(entry)
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		return strings.HasPrefix(prog, dir+"/")
	}
	want, err := realProgram(entry)
	if err != nil {
		return false // an entry naming nothing allows nothing
	}
	return want == prog
}

// argsMatch matches the arguments against an entry's argument patterns.
func argsMatch(patterns, args []string) bool {
	for i, p := range patterns {
		if p == restWords && i == len(patterns)-1 {
			return true
		}
		if i >= len(args) || !wordMatches(p, args[i]) {
			return false
		}
	}
	return len(args) == len(patterns)
}

// wordMatches: "*" matches any word; a word with '*' inside is a glob
// whose '*' matches any run of bytes; any other word itself.
func wordMatches(pattern, word string) bool {
	if pattern == anyWord {
		return true
	}
	if !strings.Contains(pattern, "*") {
		return pattern == word
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(word, parts[0]) {
		return false
	}
	word = word[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(word, mid)
		if i < 0 {
			return false
		}
		word = word[i+len(mid):]
	}
	return strings.HasSuffix(word, last) && len(word) >= len(last)
}

// CheckURL returns nil if raw is allowed, else an error wrapping
// ErrNotAllowed that names the URL (redacted).
func (a *AllowList) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err == nil && a != nil && u.User == nil && safeURLPath(u) {
		for _, p := range a.urls {
			if urlMatches(p, u) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: URL %q matches no --allow-url prefix (or its path holds ';', '\\', '..' or an encoded '.', '/', '\\'); start the worker with one that covers it",
		ErrNotAllowed, redact.URL(raw))
}

// safeURLPath refuses paths a server might read differently from the
// prefix match: ';' (path parameters), '\' (a separator to some), ".."
// segments, and encoded '.', '/' or '\'.
func safeURLPath(u *url.URL) bool {
	if u.Opaque != "" || strings.ContainsAny(u.Path, ";\\") || hasDotDot(u.Path) {
		return false
	}
	esc := strings.ToLower(u.EscapedPath())
	return !strings.Contains(esc, "%2e") && !strings.Contains(esc, "%2f") && !strings.Contains(esc, "%5c") && !strings.Contains(esc, "%3b")
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
		if seg == ".." || seg == "." {
			return true
		}
	}
	return false
}
