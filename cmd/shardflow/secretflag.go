package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// envHistoryPG is --history-pg's default (serve, console).
const envHistoryPG = "SHARDFLOW_HISTORY_PG"

// secretFlag is a string flag for a DSN or credentials: "@PATH" reads the
// value from the file PATH (its first line), so a password never appears
// in the process's arguments, which every local user can read. Its
// default comes from an environment variable, the other way to keep it
// off the command line.
type secretFlag struct{ p *string }

// secretVar registers a secretFlag named name with the default $env.
func secretVar(fs *flag.FlagSet, p *string, name, env, usage string) {
	*p = os.Getenv(env)
	fs.Var(secretFlag{p}, name, usage+" (default $"+env+"; @FILE reads it from FILE, keeping it out of the process list)")
}

func (f secretFlag) String() string {
	if f.p == nil || *f.p == "" {
		return ""
	}
	return "(set)" // never echo the secret in usage or errors
}

func (f secretFlag) Set(v string) error {
	path, ok := strings.CutPrefix(v, "@")
	if !ok {
		*f.p = v
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if *f.p = strings.TrimSpace(line); *f.p == "" {
		return fmt.Errorf("%s is empty; put the value on its first line", path)
	}
	return nil
}
