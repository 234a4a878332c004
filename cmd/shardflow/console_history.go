package main

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/shardflow/shardflow/cmd/shardflow/internal/cli"
	"github.com/shardflow/shardflow/history"
	"github.com/shardflow/shardflow/history/pghistory"
	"github.com/shardflow/shardflow/sources/postgres"
)

// Sizes of the history section.
const (
	historyRecent   = 20          // recent runs listed
	historyFailures = 10          // failed runs listed
	historyWindow   = time.Hour   // the chart's span
	historyBucket   = time.Minute // one bar of the rows/s panel
	historyScan     = 20000       // most records read for the chart
	chartW, chartH  = 600.0, 80.0 // one panel's plot area, px
	chartPad        = 40.0        // left margin for the axis label
)

// openHistory connects to the history database at dsn and returns its
// reader (the job pages' section and the API read it) and the pool's close.
func openHistory(ctx context.Context, dsn, table string) (history.Reader, func(), error) {
	pool, err := postgres.Connect(ctx, dsn, 4)
	if err != nil {
		return nil, nil, fmt.Errorf("console: history database: %w", err)
	}
	st, err := pghistory.New(pghistory.Config{Pool: pool, Table: table})
	if err != nil {
		pool.Close()
		return nil, nil, cli.Usagef("%s", err.Error())
	}
	return st, pool.Close, nil
}

// historySection renders a job's recent runs, its failed runs and one SVG
// chart (rows per second over the last hour, and run durations) from r.
func historySection(r history.Reader, now func() time.Time) HistorySection {
	return func(ctx context.Context, job string) (template.HTML, error) {
		t := now()
		recent, err := r.Runs(ctx, history.Filter{Job: job, Limit: historyScan})
		if err != nil {
			return "", err
		}
		v := historyView{Job: job}
		var window []history.Record
		for _, rec := range recent {
			if !rec.End.Before(t.Add(-historyWindow)) {
				window = append(window, rec)
			}
			if len(v.Recent) < historyRecent {
				v.Recent = append(v.Recent, runRow(rec))
			}
			if (rec.Failure > 0 || rec.Error != "") && len(v.Failures) < historyFailures {
				v.Failures = append(v.Failures, runRow(rec))
			}
		}
		v.Chart = historyChart(window, t)
		var b bytes.Buffer
		if err := historyTmpl.Execute(&b, v); err != nil {
			return "", err
		}
		return template.HTML(b.String()), nil
	}
}

type historyView struct {
	Job              string
	Chart            template.HTML
	Recent, Failures []historyRow
}

type historyRow struct {
	Begin, Duration, Server, Source, Error string
	Item                                   int
	Epoch, Success, Failure                int64
}

func runRow(r history.Record) historyRow {
	return historyRow{Begin: r.Begin.UTC().Format("2006-01-02 15:04:05"), Duration: r.Duration().Round(time.Millisecond).String(),
		Server: r.Server, Source: string(r.Source), Error: oneLine(r.Error), Item: r.Item, Epoch: r.Epoch, Success: r.Success, Failure: r.Failure}
}

var historyTmpl = template.Must(template.New("history").Parse(`
<figure id="history-chart">{{.Chart}}<figcaption>{{.Job}}: rows per second (items finished per minute / 60) and item run durations, last hour</figcaption></figure>
<h3>Failed runs</h3>
{{if .Failures}}<table id="history-failures"><tr><th>begin (UTC)</th><th>item</th><th>server</th><th>epoch</th><th>source</th><th>success</th><th>failure</th><th>error</th></tr>
{{range .Failures}}<tr><td>{{.Begin}}</td><td class="num">{{.Item}}</td><td>{{.Server}}</td><td class="num">{{.Epoch}}</td><td>{{.Source}}</td><td class="num">{{.Success}}</td><td class="num">{{.Failure}}</td><td>{{.Error}}</td></tr>
{{end}}</table>{{else}}<p id="history-failures">no failed run recorded</p>{{end}}
<h3>Recent runs</h3>
{{if .Recent}}<table id="history-runs"><tr><th>begin (UTC)</th><th>duration</th><th>item</th><th>server</th><th>epoch</th><th>source</th><th>success</th><th>failure</th></tr>
{{range .Recent}}<tr><td>{{.Begin}}</td><td>{{.Duration}}</td><td class="num">{{.Item}}</td><td>{{.Server}}</td><td class="num">{{.Epoch}}</td><td>{{.Source}}</td><td class="num">{{.Success}}</td><td class="num">{{.Failure}}</td></tr>
{{end}}</table>{{else}}<p id="history-runs">no run recorded yet</p>{{end}}`))

// rowsPerSecond buckets the rows (success + failure) of recs by the minute
// their run ended in, over the hour before now: bucket i covers
// [now-60m+i*1m, now-60m+(i+1)*1m), value in rows per second.
func rowsPerSecond(recs []history.Record, now time.Time) []float64 {
	n := int(historyWindow / historyBucket)
	out := make([]float64, n)
	start := now.Add(-historyWindow)
	for _, r := range recs {
		if r.End.Before(start) || !r.End.Before(now) {
			continue
		}
		out[int(r.End.Sub(start)/historyBucket)] += float64(r.Success+r.Failure) / historyBucket.Seconds()
	}
	return out
}

// historyChart draws two panels on one time axis (the last hour): bars of
// rows per second per minute, and one dot per item run at its end, its
// height the run's duration. Each panel is scaled to its own maximum,
// written on its axis. Rendered server-side: no script.
func historyChart(recs []history.Record, now time.Time) template.HTML {
	rates := rowsPerSecond(recs, now)
	maxRate := 0.0
	for _, v := range rates {
		maxRate = math.Max(maxRate, v)
	}
	maxDur := 0.0
	for _, r := range recs {
		maxDur = math.Max(maxDur, r.Duration().Seconds())
	}
	var b strings.Builder
	total := chartPad + chartW + 10
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" font-family="sans-serif" font-size="10">`,
		total, 2*chartH+50, total, 2*chartH+50)
	// Panel 1: rows per second.
	y0 := 12.0
	fmt.Fprintf(&b, `<text x="0" y="%.0f">rows/s</text><text x="0" y="%.0f" class="max-rate">%s</text>`, y0-2, y0+10, fmtNum(maxRate))
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#ccc"/>`, chartPad, y0, chartW, chartH)
	barW := chartW / float64(len(rates))
	for i, v := range rates {
		if v == 0 {
			continue
		}
		h := v / maxRate * chartH
		fmt.Fprintf(&b, `<rect class="rate" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7bd0"><title>%s rows/s</title></rect>`,
			chartPad+float64(i)*barW, y0+chartH-h, math.Max(barW-1, 1), h, fmtNum(v))
	}
	// Panel 2: run durations.
	y1 := y0 + chartH + 20
	fmt.Fprintf(&b, `<text x="0" y="%.0f">duration</text><text x="0" y="%.0f" class="max-duration">%s</text>`, y1-2, y1+10,
		(time.Duration(maxDur * float64(time.Second))).Round(time.Millisecond))
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#ccc"/>`, chartPad, y1, chartW, chartH)
	start := now.Add(-historyWindow)
	for _, r := range recs {
		if r.End.Before(start) || r.End.After(now) {
			continue
		}
		x := chartPad + r.End.Sub(start).Seconds()/historyWindow.Seconds()*chartW
		h := 0.0
		if maxDur > 0 {
			h = r.Duration().Seconds() / maxDur * chartH
		}
		color := "#2a9d4b"
		if r.Failure > 0 || r.Error != "" {
			color = "#d04a4a"
		}
		fmt.Fprintf(&b, `<circle class="run" cx="%.1f" cy="%.1f" r="2" fill="%s"><title>item %d on %s: %s</title></circle>`,
			x, y1+chartH-h, color, r.Item, template.HTMLEscapeString(r.Server), r.Duration().Round(time.Millisecond))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">-60 min</text><text x="%.0f" y="%.0f" text-anchor="end">now</text></svg>`,
		chartPad, y1+chartH+12, chartPad+chartW, y1+chartH+12)
	return template.HTML(b.String())
}

func fmtNum(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
