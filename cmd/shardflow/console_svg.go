package main

import (
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/shardflow/shardflow/coord/workflow"
)

// The job graph of a workflow run as server-rendered SVG: one box per step
// (the job's name, its state and its items completed of its total, in the
// state's colours) in columns by depth (the first job left, each step one
// column right of its deepest upstream), an arrow per dependsOn edge. No
// script and no style attribute (the console's CSP allows neither): the
// colours are SVG presentation attributes. Every text and attribute value
// from the store is escaped: job names are user input.

// Box and gap sizes of the graph, in SVG user units (CSS pixels).
const (
	svgNodeW  = 180
	svgNodeH  = 54
	svgColGap = 64
	svgRowGap = 22
	svgMargin = 12
	// svgNameRunes is how much of a job's name a box shows (the whole
	// name is the box's tooltip and the step table's).
	svgNameRunes = 22
)

// stateColours are each state's fill, stroke and dash pattern ("" solid).
var stateColours = map[string][3]string{
	workflow.StatePending:   {"#f3f4f6", "#9aa3b2", "4 3"},
	workflow.StateRunning:   {"#dbe6fd", "#2b5fd9", ""},
	workflow.StateSucceeded: {"#d8f1df", "#145c2a", ""},
	workflow.StateFailed:    {"#fbdada", "#8a1111", ""},
	workflow.StateStopped:   {"#fdefc8", "#6b4b00", ""},
	workflow.StateSkipped:   {"#eef0f4", "#6b7280", "2 2"},
	workflow.StateCancelled: {"#e3e6eb", "#555555", ""},
	workflow.StateRemoved:   {"#ffffff", "#bbbbbb", "2 4"},
}

// esc escapes s for SVG text and double-quoted attribute values.
func esc(s string) string { return template.HTMLEscapeString(s) }

// svgLayout places each step of rs: its column (depth) and row.
func svgLayout(rs workflow.RunStatus) (col, row map[string]int, cols, rows int) {
	in := map[string]workflow.Step{}
	for _, s := range rs.Steps {
		in[s.Job] = s
	}
	col = map[string]int{}
	var depth func(job string, seen map[string]bool) int
	depth = func(job string, seen map[string]bool) int {
		if d, ok := col[job]; ok {
			return d
		}
		if seen[job] { // a cycle written by hand: cut it
			return 0
		}
		seen[job] = true
		d := 0
		s := in[job]
		if s.State == workflow.StateRemoved && len(rs.Steps) > 0 && job != rs.Steps[0].Job {
			d = 1 // a removed step's upstreams are gone with it
		}
		for _, u := range s.Upstreams {
			if _, ok := in[u]; ok {
				d = max(d, depth(u, seen)+1)
			}
		}
		col[job] = d
		return d
	}
	for _, s := range rs.Steps {
		depth(s.Job, map[string]bool{})
	}
	row = map[string]int{}
	perCol := map[int]int{}
	for _, s := range rs.Steps {
		c := col[s.Job]
		row[s.Job] = perCol[c]
		perCol[c]++
		cols = max(cols, c+1)
		rows = max(rows, perCol[c])
	}
	return col, row, cols, rows
}

// shortName cuts a job's name to what its box shows.
func shortName(name string) string {
	if utf8.RuneCountInString(name) <= svgNameRunes {
		return name
	}
	r := []rune(name)
	return string(r[:svgNameRunes-1]) + "…"
}

// workflowSVG renders rs's job graph.
func workflowSVG(rs workflow.RunStatus) template.HTML {
	col, row, cols, rows := svgLayout(rs)
	w := 2*svgMargin + cols*svgNodeW + max(cols-1, 0)*svgColGap
	h := 2*svgMargin + rows*svgNodeH + max(rows-1, 0)*svgRowGap
	x := func(job string) int { return svgMargin + col[job]*(svgNodeW+svgColGap) }
	y := func(job string) int { return svgMargin + row[job]*(svgNodeH+svgRowGap) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="workflow-graph" id="workflow-graph" data-run="%s" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		esc(rs.Run), w, h, w, h, esc("job graph of workflow run "+rs.Run))
	b.WriteString(`<defs><marker id="wf-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#6b7280"/></marker></defs>`)
	for _, s := range rs.Steps {
		for _, u := range s.Upstreams {
			if _, ok := col[u]; !ok || u == s.Job {
				continue
			}
			x1, y1 := x(u)+svgNodeW, y(u)+svgNodeH/2
			x2, y2 := x(s.Job), y(s.Job)+svgNodeH/2
			mid := (x1 + x2) / 2
			fmt.Fprintf(&b, `<path class="wf-edge" data-from="%s" data-to="%s" d="M%d,%d C%d,%d %d,%d %d,%d" fill="none" stroke="#6b7280" stroke-width="1.5" marker-end="url(#wf-arrow)"/>`,
				esc(u), esc(s.Job), x1, y1, mid, y1, mid, y2, x2-1, y2)
		}
	}
	for _, s := range rs.Steps {
		c, ok := stateColours[s.State]
		if !ok {
			c = [3]string{"#ffffff", "#1d2330", ""}
		}
		dash := ""
		if c[2] != "" {
			dash = ` stroke-dasharray="` + c[2] + `"`
		}
		label := s.State + " · " + s.Progress()
		fmt.Fprintf(&b, `<g class="wf-step" data-job="%s" data-state="%s" data-progress="%s"><a href="%s"><title>%s</title>`,
			esc(s.Job), esc(s.State), esc(s.Progress()), esc("/jobs/"+url.PathEscape(s.Job)), esc(s.Job+": "+s.State+", items "+s.Progress()))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="%s" stroke="%s" stroke-width="1.5"%s/>`,
			x(s.Job), y(s.Job), svgNodeW, svgNodeH, c[0], c[1], dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="600" fill="#1d2330">%s</text>`, x(s.Job)+10, y(s.Job)+22, esc(shortName(s.Job)))
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" fill="%s">%s</text></a></g>`, x(s.Job)+10, y(s.Job)+42, c[1], esc(label))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every value above is escaped
}

// runState sums a workflow run up for its list: "running" while a step
// runs or waits, else the worst decided state ("failed", "cancelled",
// "stopped"), else "succeeded".
func runState(rs workflow.RunStatus) string {
	states := make([]string, 0, len(rs.Steps))
	for _, s := range rs.Steps {
		states = append(states, s.State)
	}
	for _, st := range []string{workflow.StateRunning, workflow.StatePending, workflow.StateCancelled, workflow.StateFailed, workflow.StateStopped} {
		if slices.Contains(states, st) {
			if st == workflow.StatePending {
				return workflow.StateRunning
			}
			return st
		}
	}
	return workflow.StateSucceeded
}
