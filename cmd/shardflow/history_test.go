package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/integration"
)

func runHistoryCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHistoryCommand(t *testing.T) {
	dsn := integration.SharedPostgres(t).NewDatabase(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st, err := pghistory.New(pghistory.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	// No table yet: a clear error, exit 1.
	if code, _, stderr := runHistoryCLI(t, "history", "--pg", dsn); code != 1 || !strings.Contains(stderr, "no history table") {
		t.Fatalf("history before any record: exit %d, stderr %q; want 1 and 'no history table'", code, stderr)
	}
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	rec := func(server string, item int, epoch int64, src history.Source, minutes int, errText string) history.Record {
		b := t0.Add(time.Duration(minutes) * time.Minute)
		return history.Record{Job: "orders", Server: server, Item: item, Epoch: epoch, Source: src,
			Begin: b, End: b.Add(30 * time.Second), Success: 5, Failure: int64(len(errText)), Error: errText}
	}
	if err := st.Write(t.Context(), []history.Record{
		rec("a", 0, 1, history.SourceNormal, 0, ""),
		rec("a", 1, 1, history.SourceNormal, 0, ""),
		rec("b", 1, 2, history.SourceFailover, 20, "x"),
		rec("a", 0, 1, history.SourceManual, 50, ""),
	}); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runHistoryCLI(t, "history", "--pg", dsn, "--json", "--job", "orders", "--item", "1")
	if code != 0 {
		t.Fatalf("history --json: exit %d: %s", code, stderr)
	}
	var objs []map[string]any
	if err := json.Unmarshal([]byte(stdout), &objs); err != nil {
		t.Fatalf("--json output is not an array of objects: %v\n%s", err, stdout)
	}
	if len(objs) != 2 || objs[0]["server"] != "b" || objs[0]["source"] != "failover" || objs[1]["server"] != "a" {
		t.Fatalf("item 1's runs newest first: %s", stdout)
	}
	want := []string{"begin", "end", "epoch", "error", "failure", "item", "job", "server", "source", "success"}
	for _, o := range objs {
		var keys []string
		for k := range o {
			keys = append(keys, k)
		}
		if len(keys) != len(want) {
			t.Fatalf("object %v has fields %v, want exactly %v", o, keys, want)
		}
		for _, k := range want {
			if _, ok := o[k]; !ok {
				t.Fatalf("object %v lacks %q", o, k)
			}
		}
	}
	if objs[0]["epoch"] != 2.0 || objs[0]["error"] != "x" || objs[0]["begin"] != t0.Add(20*time.Minute).Format(time.RFC3339Nano) {
		t.Fatalf("newest record %v", objs[0])
	}

	// --since: only the run that ended within the last 15 minutes.
	code, stdout, _ = runHistoryCLI(t, "history", "--pg", dsn, "--since", "15m", "--json")
	if code != 0 || strings.Count(stdout, `"job"`) != 1 || !strings.Contains(stdout, `"manual"`) {
		t.Fatalf("--since 15m: exit %d\n%s", code, stdout)
	}
	// The table form, newest first.
	code, stdout, _ = runHistoryCLI(t, "history", "--pg", dsn, "--server", "a")
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); code != 0 || len(lines) != 4 || !strings.Contains(lines[1], "manual") {
		t.Fatalf("table for server a: exit %d\n%s", code, stdout)
	}
	// --at: at t0+30m item 0 was a's (epoch 1), item 1 b's (epoch 2).
	at := t0.Add(30 * time.Minute).Format(time.RFC3339)
	code, stdout, _ = runHistoryCLI(t, "history", "--pg", dsn, "--at", at, "--json")
	var owners []history.Record
	if err := json.Unmarshal([]byte(stdout), &owners); code != 0 || err != nil {
		t.Fatalf("--at --json: exit %d, %v\n%s", code, err, stdout)
	}
	if len(owners) != 2 || owners[0].Server != "a" || owners[0].Epoch != 1 || owners[1].Server != "b" || owners[1].Epoch != 2 {
		t.Fatalf("owners at %s: %+v", at, owners)
	}
	code, stdout, _ = runHistoryCLI(t, "history", "--pg", dsn, "--at", at)
	if code != 0 || !strings.Contains(stdout, "idle, last run ended") {
		t.Fatalf("--at table: exit %d\n%s", code, stdout)
	}
}

func TestHistoryCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"history"}, // no --pg (SHARDFLOW_PG unset by the test)
		{"history", "--pg", "postgres://x", "--at", "yesterday"},
		{"history", "--pg", "postgres://x", "--since", "-1h"},
		{"history", "--pg", "postgres://x", "extra"},
	} {
		t.Setenv("SHARDFLOW_PG", "")
		if args[0] == "history" && len(args) == 1 {
			args = []string{"history", "--pg", ""}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out, errb bytes.Buffer
		code := run(ctx, args, &out, &errb)
		cancel()
		if code != 2 || !strings.Contains(errb.String(), "shardflow history:") {
			t.Errorf("%v: exit %d, stderr %q; want 2 with an explanation", args, code, errb.String())
		}
	}
}

// `serve --history-pg` records through startHistoryRecorder: the records
// are in the table once stop has flushed them.
func TestStartHistoryRecorder(t *testing.T) {
	rec, stop, err := startHistoryRecorder(t.Context(), "", cli.Logger)
	if err != nil || rec != nil {
		t.Fatalf("no DSN: recorder %v, err %v; want none", rec, err)
	}
	stop()
	dsn := integration.SharedPostgres(t).NewDatabase(t)
	rec, stop, err = startHistoryRecorder(t.Context(), dsn, cli.Logger)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec.Record(history.Record{Job: "script", Server: "w1", Item: 0, Epoch: 1, Source: history.SourceNormal, Begin: now, End: now, Success: 1})
	stop()
	code, stdout, stderr := runHistoryCLI(t, "history", "--pg", dsn, "--json")
	if code != 0 || strings.Count(stdout, `"job": "script"`) != 1 {
		t.Fatalf("history after stop: exit %d\n%s%s", code, stdout, stderr)
	}
}
