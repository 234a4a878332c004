package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestReadVersion(t *testing.T) {
	installed := &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}
	checkout := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tt := range []struct {
		name            string
		ldVersion, ldCo string
		info            *debug.BuildInfo
		ok              bool
		want            buildVersion
	}{
		{"go install @VERSION", "", "", installed, true, buildVersion{Version: "v0.1.0", Commit: "unknown"}},
		{"go build in a checkout", "", "", checkout, true, buildVersion{Version: "(devel)", Commit: "0123abcd", Modified: true}},
		{"-ldflags win", "v0.2.0", "feedbeef", checkout, true, buildVersion{Version: "v0.2.0", Commit: "feedbeef", Modified: true}},
		{"no build info", "", "", nil, false, buildVersion{Version: "(devel)", Commit: "unknown"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			version, commit = tt.ldVersion, tt.ldCo
			defer func() { version, commit = "", "" }()
			got := readVersion(tt.info, tt.ok)
			got.Go = ""
			if got != tt.want {
				t.Fatalf("readVersion: %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	out, errOut, code := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "shardflow ") || !strings.Contains(out, "\ncommit ") || !strings.Contains(out, "\ngo1.") {
		t.Fatalf("version: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "version", "extra"); code != 2 || !strings.Contains(errOut, "no arguments") {
		t.Fatalf("version extra: exit %d %q", code, errOut)
	}
}
