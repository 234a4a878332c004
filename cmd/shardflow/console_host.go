package main

import (
	"net"
	"net/http"
	"os"
	"strings"
)

// envConsoleAllowedHosts lists the console's allowed host names,
// comma-separated, when --allowed-host is absent.
const envConsoleAllowedHosts = "SHARDFLOW_CONSOLE_ALLOWED_HOSTS"

// hostCheck refuses requests whose Host header names a host the console
// does not serve under: a DNS-rebinding page (a name the attacker controls,
// resolved to the console's address) reaches the console with its own
// name in Host, so checking it keeps even a loopback console unreadable
// from a web page. IP literals and "localhost" are always accepted (a
// rebinding attack always sends a name); other names must be listed
// (--allowed-host); "*" accepts any.
type hostCheck struct {
	names map[string]bool
	any   bool
}

// newHostCheck accepts the names given (case-insensitive, ports ignored).
func newHostCheck(names []string) hostCheck {
	hc := hostCheck{names: map[string]bool{}}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "*" {
			hc.any = true
		}
		if h, _, err := net.SplitHostPort(n); err == nil {
			n = h
		}
		if n != "" {
			hc.names[strings.Trim(n, "[]")] = true
		}
	}
	return hc
}

// allowedHostsFromEnv is --allowed-host's default.
func allowedHostsFromEnv() []string {
	var out []string
	for _, n := range strings.Split(os.Getenv(envConsoleAllowedHosts), ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

func (hc hostCheck) allowed(hostport string) bool {
	if hc.any {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || net.ParseIP(host) != nil {
		return true
	}
	return hc.names[host]
}

// wrap refuses a request to a host not allowed with 421 Misdirected
// Request, naming the fix.
func (hc hostCheck) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hc.allowed(r.Host) {
			http.Error(w, "console: this console does not serve the host name in the request; "+
				"if it is yours, start the console with --allowed-host NAME (or "+envConsoleAllowedHosts+")", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
