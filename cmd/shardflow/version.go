package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
)

// Set with -ldflags "-X main.version=v0.1.0 -X main.commit=abc123" by a
// build that knows better than the Go toolchain (make image does); empty:
// read from the binary's build info.
var (
	version string
	commit  string
)

// buildVersion is what `shardflow version` prints.
type buildVersion struct {
	Version, Commit, Go string
	Modified            bool // built from a working tree with uncommitted changes
}

// readVersion takes the ldflags values first, then the build info: the
// module version `go install ...@VERSION` records (v0.1.0; "(devel)" for
// a build inside a checkout, whose VCS stamp gives a pseudo-version in
// recent Go), and the VCS revision `go build` stamps in a checkout.
func readVersion(info *debug.BuildInfo, ok bool) buildVersion {
	v := buildVersion{Version: version, Commit: commit, Go: runtime.Version()}
	if ok {
		if v.Version == "" {
			v.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	return v
}

// runVersion is `shardflow version`: version, commit and Go version.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("version", stderr)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("version takes no arguments, got %q", fs.Args())
	}
	v := readVersion(debug.ReadBuildInfo())
	dirty := ""
	if v.Modified {
		dirty = " (modified)"
	}
	fmt.Fprintf(stdout, "shardflow %s\ncommit %s%s\n%s\n", v.Version, v.Commit, dirty, v.Go)
	return nil
}
