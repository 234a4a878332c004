package main

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Environment variables holding the console's credentials, when the
// matching file flag is absent.
const (
	envConsoleToken     = "SHARDFLOW_CONSOLE_TOKEN"      // a bearer token
	envConsoleBasicAuth = "SHARDFLOW_CONSOLE_BASIC_AUTH" // user:password
)

// minPasswordLen is the shortest basic-auth password accepted: with login
// throttling (5 tries a minute per address) 12 characters cannot be
// guessed.
const minPasswordLen = 12

// sessionCookie names the browser session cookie set by /login.
const sessionCookie = "shardflow_session"

// maxSessions bounds the logged-in browser sessions kept in memory; the
// oldest is dropped first.
const maxSessions = 256

// sessionTTL is how long a browser session lasts.
const sessionTTL = 12 * time.Hour

// credentials are what the console accepts for state-changing requests: a
// bearer token and/or one basic-auth user. Only digests are kept, and
// compared in constant time.
type credentials struct {
	token    []byte // sha256 of the token; nil: no token
	user     string
	password []byte // sha256 of the password; nil: no basic auth
}

// configured reports whether any credential is set; without one the
// console is read-only.
func (c *credentials) configured() bool { return c.token != nil || c.password != nil }

func digest(s string) []byte { d := sha256.Sum256([]byte(s)); return d[:] }

// loadCredentials reads the token and basic-auth files (or the environment
// when a file flag is empty). The files hold one line; surrounding space is
// trimmed.
func loadCredentials(tokenFile, basicFile string) (*credentials, error) {
	read := func(flagName, path, env string) (string, error) {
		if path == "" {
			return strings.TrimSpace(os.Getenv(env)), nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("console: %s: %w", flagName, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("console: %s %s is empty; put the secret on its first line", flagName, path)
		}
		return v, nil
	}
	c := &credentials{}
	tok, err := read("--token-file", tokenFile, envConsoleToken)
	if err != nil {
		return nil, err
	}
	if tok != "" {
		if len(tok) < 16 {
			return nil, fmt.Errorf("console: the token is %d characters; use at least 16 (e.g. `openssl rand -hex 32`)", len(tok))
		}
		c.token = digest(tok)
	}
	basic, err := read("--basic-auth-file", basicFile, envConsoleBasicAuth)
	if err != nil {
		return nil, err
	}
	if basic != "" {
		user, pass, ok := strings.Cut(basic, ":")
		if !ok || user == "" || pass == "" {
			return nil, errors.New("console: basic-auth credentials must be user:password (from --basic-auth-file or " + envConsoleBasicAuth + ")")
		}
		if len(pass) < minPasswordLen {
			return nil, fmt.Errorf("console: the basic-auth password is %d characters; use at least %d (e.g. `openssl rand -base64 18`)", len(pass), minPasswordLen)
		}
		c.user, c.password = user, digest(pass)
	}
	return c, nil
}

// checkToken reports whether tok is the configured token.
func (c *credentials) checkToken(tok string) bool {
	return c.token != nil && subtle.ConstantTimeCompare(digest(tok), c.token) == 1
}

// checkBasic reports whether user:pass are the configured basic-auth ones.
func (c *credentials) checkBasic(user, pass string) bool {
	if c.password == nil {
		return false
	}
	userOK := subtle.ConstantTimeCompare(digest(user), digest(c.user))
	passOK := subtle.ConstantTimeCompare(digest(pass), c.password)
	return userOK&passOK == 1
}

// requireLoopbackOrAuth refuses a listen address that is not loopback when
// no credential is configured, saying why.
func requireLoopbackOrAuth(addr string, creds *credentials) error {
	if creds.configured() {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("console: --listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	// Without credentials the console is read-only, so the risk is not
	// actions: it is every job's status and stored config (commands, URLs,
	// headers, parameters) shown to the network by a console nobody
	// configured for it.
	return fmt.Errorf("console: refusing to listen on %s, which is not a loopback address, without credentials: "+
		"this console would show every job's status and stored config (commands, URLs, headers, parameters) to anyone "+
		"who can reach it, and nobody could act through it (it is read-only without credentials). "+
		"Set --token-file or --basic-auth-file (or %s / %s) for a console on the network, or listen on 127.0.0.1",
		addr, envConsoleToken, envConsoleBasicAuth)
}

// sessions are the logged-in browsers: random ids to user names.
type sessions struct {
	mu    sync.Mutex
	byID  map[string]browserSession
	order []string
}

type browserSession struct {
	user    string
	expires time.Time
}

func newSessions() *sessions { return &sessions{byID: map[string]browserSession{}} }

func (s *sessions) create(user string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID[id] = browserSession{user: user, expires: time.Now().Add(sessionTTL)}
	s.order = append(s.order, id)
	for len(s.order) > maxSessions {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
	return id
}

func (s *sessions) lookup(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs, ok := s.byID[id]
	if !ok || time.Now().After(bs.expires) {
		return "", false
	}
	return bs.user, true
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// authenticate returns who made r: a bearer token ("token"), basic-auth
// credentials (the user), or a browser session cookie (the user who logged
// in). ok is false when none checks out.
func (cs *consoleServer) authenticate(r *http.Request) (who string, ok bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, found := strings.CutPrefix(h, "Bearer "); found {
			return "token", cs.creds.checkToken(strings.TrimSpace(tok))
		}
		if user, pass, found := r.BasicAuth(); found {
			return user, cs.creds.checkBasic(user, pass)
		}
		return "", false
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if user, found := cs.sessions.lookup(c.Value); found {
			return user, true
		}
	}
	return "", false
}

// actorFor names who acts in the audit log: the console user and address.
func actorFor(who string, r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "console:" + who + " from " + host
}
