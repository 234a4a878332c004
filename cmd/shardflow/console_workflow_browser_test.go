package main

import (
	"os"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleWorkflowInBrowser: in headless Chromium, the workflow runs
// page links to the run, whose page renders the job graph: an SVG element
// (parsed as SVG, not as unknown HTML) with a laid-out box per step, in
// its state, and an arrow per edge, under the console's CSP (no script,
// no style attribute).
func TestConsoleWorkflowInBrowser(t *testing.T) {
	ctx := browser(t)
	console, _, run := wfFixture(t, nil)
	runSteps(t, ctx,
		step{"open the workflow runs", chromedp.Navigate(console.URL + "/workflows"), true},
		step{"follow the run's link", chromedp.Click(chromedp.CSS(`table.workflow-runs a[href="/workflows/` + run + `"]`)), true},
		step{"see the graph", chromedp.WaitVisible(chromedp.CSS(`#workflow-graph`)), false},
	)
	isSVG, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#workflow-graph') instanceof SVGSVGElement`))
	if err != nil || !isSVG {
		t.Fatalf("#workflow-graph is not an SVG element: %v, %v", isSVG, err)
	}
	steps, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#workflow-graph g.wf-step')).map(g => {
		const r = g.querySelector('rect').getBoundingClientRect();
		return g.dataset.job + ' ' + g.dataset.state + ' ' + (r.width >= 150 && r.height >= 40 ? 'drawn' : 'not drawn ' + r.width + 'x' + r.height);
	})`))
	if want := []string{"a succeeded drawn", "b failed drawn", "c running drawn", "d pending drawn"}; err != nil || !slices.Equal(steps, want) {
		t.Fatalf("the graph's steps in the browser %q, %v; want %q", steps, err, want)
	}
	edges, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll('#workflow-graph path.wf-edge')).filter(p => p.getTotalLength() > 20).length`))
	if err != nil || edges != 4 {
		t.Fatalf("the graph's drawn edges: %d, %v; want 4", edges, err)
	}
	screenshot(t, ctx, os.Getenv("SHARDFLOW_SCREENSHOTS"), "console-workflow.png")
}
