package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/history"
)

type failingReader struct{}

func (failingReader) Runs(context.Context, history.Filter) ([]history.Record, error) {
	return nil, errors.New("history db down")
}

func (failingReader) OwnersAt(context.Context, history.Filter, time.Time) ([]history.Record, error) {
	return nil, errors.New("history db down")
}

func TestRowsPerSecondBuckets(t *testing.T) {
	now := time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC)
	at := func(minAgo float64) time.Time { return now.Add(-time.Duration(minAgo * float64(time.Minute))) }
	recs := []history.Record{
		{End: at(0.5), Success: 600},             // last bucket: 10 rows/s
		{End: at(0.2), Success: 50, Failure: 10}, // same bucket: +1 row/s
		{End: at(59.5), Success: 120},            // first bucket: 2 rows/s
		{End: at(61), Success: 1000},             // before the window
		{End: now, Success: 1000},                // at now: outside [now-1h, now)
	}
	got := rowsPerSecond(recs, now)
	if len(got) != 60 || got[59] != 11 || got[0] != 2 {
		t.Fatalf("buckets: len %d, first %v, last %v; want 60 buckets, 2 and 11", len(got), got[0], got[59])
	}
	var sum float64
	for _, v := range got {
		sum += v
	}
	if sum != 13 {
		t.Fatalf("sum of rates %v, want 13 (nothing else counted)", sum)
	}
}

func TestConsoleHistorySectionFromRecords(t *testing.T) {
	now := time.Now()
	mem := history.NewMemory(0)
	for i := range 30 {
		end := now.Add(-time.Duration(30-i) * time.Minute)
		r := history.Record{Job: "console-job", Server: "s1", Item: i % 4, Epoch: 3, Source: history.SourceNormal,
			Begin: end.Add(-2 * time.Second), End: end, Success: 120}
		if i == 7 {
			r.Success, r.Failure, r.Error = 118, 2, "duplicate key <value>"
		}
		mem.Record(r)
	}
	mem.Record(history.Record{Job: "other", Server: "s2", Source: history.SourceManual, Begin: now, End: now})
	h, _ := consoleFixture(t, nil, historySection(mem, func() time.Time { return now }))
	body := get(h, "/jobs/console-job", nil).Body.String()
	for _, want := range []string{"<h2>History</h2>", `<svg xmlns="http://www.w3.org/2000/svg"`, `id="history-failures"`,
		"duplicate key &lt;value&gt;", `id="history-runs"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("job page lacks %q:\n%s", want, body)
		}
	}
	if n := strings.Count(body, `class="rate"`); n != 30 {
		t.Errorf("%d rows/s bars, want 30 (one per minute with a finished run)", n)
	}
	if n := strings.Count(body, `class="run"`); n != 30 {
		t.Errorf("%d run dots, want 30 (other jobs excluded)", n)
	}
	runs := regexp.MustCompile(`(?s)id="history-runs".*?</table>`).FindString(body)
	if n := strings.Count(runs, "<tr>"); n != historyRecent+1 {
		t.Errorf("recent runs table has %d rows, want a header and %d runs", n, historyRecent)
	}
	if !strings.Contains(body, `class="max-rate">2<`) { // 120 rows per minute
		t.Errorf("rows/s axis maximum not 2")
	}

	// A failing reader shows its error in place of the section.
	hb, _ := consoleFixture(t, nil, historySection(failingReader{}, time.Now))
	if body := get(hb, "/jobs/console-job", nil).Body.String(); !strings.Contains(body, "history db down") {
		t.Fatalf("reader error not shown:\n%s", body)
	}
}
