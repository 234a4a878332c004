package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// parseTrustedProxies reads --trusted-proxy values: an IP address or a
// CIDR each.
func parseTrustedProxies(values []string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, v := range values {
		v = strings.TrimSpace(v)
		if !strings.Contains(v, "/") {
			ip := net.ParseIP(v)
			if ip == nil {
				return nil, fmt.Errorf("console: --trusted-proxy %q is not an IP address or CIDR (e.g. 10.0.0.5 or 10.0.0.0/24)", v)
			}
			bits := 32
			if ip.To4() == nil {
				bits = 128
			}
			out = append(out, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, err := net.ParseCIDR(v)
		if err != nil {
			return nil, fmt.Errorf("console: --trusted-proxy %q is not an IP address or CIDR (e.g. 10.0.0.5 or 10.0.0.0/24)", v)
		}
		out = append(out, n)
	}
	return out, nil
}

// secureRequest reports whether r reached the console over TLS: directly,
// or through a trusted proxy that says so (X-Forwarded-Proto: https).
// Session cookies are Secure exactly then.
func (cs *consoleServer) secureRequest(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https") {
		return false
	}
	ip := net.ParseIP(clientAddr(r))
	for _, n := range cs.trustedProxies {
		if ip != nil && n.Contains(ip) {
			return true
		}
	}
	return false
}

// loopbackListen reports whether a --listen address is loopback only.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
