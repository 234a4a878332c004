package main

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/workflow"
)

// apiWorkflowPage is the body of GET /api/v1/workflows.
type apiWorkflowPage struct {
	Namespace string               `json:"namespace"`
	Runs      []workflow.RunStatus `json:"runs"`
}

// apiWorkflows is GET /api/v1/workflows?job=FIRST&runs=N: the last N
// (default 10, at most workflow.KeepRuns) workflow runs of each job that
// starts workflow runs (or of FIRST alone), newest first, each with its
// steps, as `shardflow workflow status --json` prints them.
func (cs *consoleServer) apiWorkflows(w http.ResponseWriter, r *http.Request) {
	n := 10
	if v := r.URL.Query().Get("runs"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 || n > workflow.KeepRuns {
			writeAPIError(w, http.StatusBadRequest, "runs", "runs must be a number from 1 to "+strconv.Itoa(workflow.KeepRuns)+", got "+strconv.Quote(v))
			return
		}
	}
	runs, err := cs.admin.WorkflowRuns(r.Context(), r.URL.Query().Get("job"), n)
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiWorkflowPage{Namespace: cs.namespace, Runs: runs})
}

// routeWorkflows adds the workflow pages and actions to mux: the list of
// recent workflow runs, a run's page with its job graph (SVG), and the
// actions on a run from the page's buttons and the API. Reads are as
// open as the other pages (a workflow run holds job names, states and
// counts, no config value); actions need what every action needs
// (requireAuth) and are audited through the Admin.
func (cs *consoleServer) routeWorkflows(mux *http.ServeMux) {
	mux.HandleFunc("GET /workflows", cs.workflowsPage)
	mux.HandleFunc("GET /workflows/{run}", cs.workflowPage)
	mux.HandleFunc("POST /workflows/{run}/act", cs.requireAuth(cs.workflowAct))
	mux.HandleFunc("GET /api/v1/workflows/{run}", cs.apiWorkflowRun)
	mux.HandleFunc("POST /api/v1/workflows/{run}/actions", cs.requireAuth(cs.apiWorkflowAction))
}

// apiWorkflowRun is GET /api/v1/workflows/{run}: one workflow run with
// its steps.
func (cs *consoleServer) apiWorkflowRun(w http.ResponseWriter, r *http.Request) {
	rs, err := cs.admin.WorkflowRun(r.Context(), r.PathValue("run"))
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rs)
}

// workflowActions are the actions on a workflow run, each with whether it
// names a step's job.
var workflowActions = map[string]bool{"rerun": true, "mark-success": true, "skip": true, "cancel": false}

// apiWorkflowActionRequest is the body of POST /api/v1/workflows/{run}/actions.
type apiWorkflowActionRequest struct {
	// Action is rerun, mark-success, skip or cancel.
	Action string `json:"action"`
	// Job is the step's job (rerun: the step it runs again from); none
	// for cancel.
	Job string `json:"job,omitempty"`
}

// workflowCancelled is one step a cancel cancelled, with its state before.
type workflowCancelled struct {
	Job string `json:"job"`
	Was string `json:"was"`
}

// apiWorkflowActionResult is the body of a successful workflow action:
// what it did.
type apiWorkflowActionResult struct {
	Run    string `json:"run"`
	Action string `json:"action"`
	Job    string `json:"job,omitempty"`
	// Started are the steps a skip or a mark-success started.
	Started []string `json:"started,omitempty"`
	// Cancelled are the steps a cancel cancelled.
	Cancelled []workflowCancelled `json:"cancelled,omitempty"`
	// Actor is who the audit log records.
	Actor string `json:"actor"`
}

// doWorkflowAction performs one workflow action as admin and says what it
// did.
func doWorkflowAction(r *http.Request, admin *coord.Admin, run string, req apiWorkflowActionRequest) (apiWorkflowActionResult, error) {
	res := apiWorkflowActionResult{Run: run, Action: req.Action, Job: req.Job, Actor: admin.Actor()}
	ctx := r.Context()
	var err error
	switch req.Action {
	case "rerun":
		err = admin.WorkflowRerun(ctx, run, req.Job)
	case "mark-success":
		res.Started, err = admin.WorkflowMarkSucceeded(ctx, run, req.Job)
	case "skip":
		res.Started, err = admin.WorkflowSkip(ctx, run, req.Job)
	case "cancel":
		var was []workflow.Step
		was, err = admin.WorkflowCancel(ctx, run)
		for _, s := range was {
			res.Cancelled = append(res.Cancelled, workflowCancelled{Job: s.Job, Was: s.State})
		}
	}
	return res, err
}

// checkWorkflowAction checks an action's name and whether it names a job.
func checkWorkflowAction(req apiWorkflowActionRequest) error {
	needsJob, ok := workflowActions[req.Action]
	switch {
	case !ok:
		return badField("action", "action %q is not one of rerun, mark-success, skip, cancel", req.Action)
	case needsJob && req.Job == "":
		return badField("job", "%s needs job, the step's job", req.Action)
	case !needsJob && req.Job != "":
		return badField("job", "cancel applies to the whole workflow run; leave job out")
	}
	return nil
}

// apiWorkflowAction is POST /api/v1/workflows/{run}/actions: one
// operator action on a workflow run, performed through the Admin acting
// as the request's user, 200 with what it did.
func (cs *consoleServer) apiWorkflowAction(w http.ResponseWriter, r *http.Request) {
	var req apiWorkflowActionRequest
	if err := decodeJSONBody(w, r, &req, "action and job"); err != nil {
		writeAPIErr(w, err)
		return
	}
	if err := checkWorkflowAction(req); err != nil {
		writeAPIErr(w, err)
		return
	}
	res, err := doWorkflowAction(r, adminFor(r), r.PathValue("run"), req)
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// workflowsView is the workflow runs page: each first job's recent runs.
type workflowsView struct {
	Viewer
	Groups []workflowGroup
}

type workflowGroup struct {
	First string
	Runs  []workflowRow
}

type workflowRow struct {
	workflow.RunStatus
	State string
}

func (cs *consoleServer) workflowsPage(w http.ResponseWriter, r *http.Request) {
	runs, err := cs.admin.WorkflowRuns(r.Context(), r.URL.Query().Get("job"), 10)
	if err != nil {
		httpError(w, err)
		return
	}
	v := workflowsView{Viewer: cs.viewerFor(r)}
	for _, rs := range runs {
		first, _, _ := workflow.ParseRunID(rs.Run)
		if len(v.Groups) == 0 || v.Groups[len(v.Groups)-1].First != first {
			v.Groups = append(v.Groups, workflowGroup{First: first})
		}
		g := &v.Groups[len(v.Groups)-1]
		g.Runs = append(g.Runs, workflowRow{RunStatus: rs, State: runState(rs)})
	}
	cs.render(w, "workflows.html", v, http.StatusOK)
}

// workflowView is one workflow run's page.
type workflowView struct {
	Viewer
	Run   workflow.RunStatus
	State string
	Graph template.HTML
	// Steps are the run's steps with the actions that apply to each.
	Steps []workflowStepRow
	// CanCancel: a step of the run is pending or running.
	CanCancel bool
}

type workflowStepRow struct {
	workflow.Step
	Skip, MarkSuccess, Rerun bool
}

func (cs *consoleServer) workflowPage(w http.ResponseWriter, r *http.Request) {
	cs.renderWorkflow(w, r, doneMessages[r.URL.Query().Get("done")], "", http.StatusOK)
}

// renderWorkflow renders a workflow run's page with a message or an
// error (code).
func (cs *consoleServer) renderWorkflow(w http.ResponseWriter, r *http.Request, msg, errText string, code int) {
	rs, err := cs.admin.WorkflowRun(r.Context(), r.PathValue("run"))
	if err != nil {
		httpError(w, err)
		return
	}
	v := workflowView{Viewer: cs.viewerFor(r), Run: rs, State: runState(rs), Graph: workflowSVG(rs)}
	v.Message, v.Error = msg, errText
	running := false
	for _, s := range rs.Steps {
		running = running || s.State == workflow.StateRunning
		v.CanCancel = v.CanCancel || s.State == workflow.StateRunning || s.State == workflow.StatePending
	}
	for _, s := range rs.Steps {
		v.Steps = append(v.Steps, workflowStepRow{Step: s,
			Skip:        s.State == workflow.StatePending || s.State == workflow.StateFailed || s.State == workflow.StateStopped,
			MarkSuccess: s.State == workflow.StateFailed || s.State == workflow.StateStopped,
			Rerun:       !running && s.State != workflow.StatePending && s.State != workflow.StateRemoved})
	}
	cs.render(w, "workflow.html", v, code)
}

// workflowAct is the workflow page's form target: it performs the action
// and redirects back with a fixed message, or renders the page again
// with the refusal.
func (cs *consoleServer) workflowAct(w http.ResponseWriter, r *http.Request) {
	req := apiWorkflowActionRequest{Action: r.FormValue("action"), Job: r.FormValue("job")}
	err := checkWorkflowAction(req)
	if err == nil && req.Action == "cancel" && r.FormValue("confirm") != "yes" {
		err = badField("confirm", "tick \"sure\" to cancel the workflow run")
	}
	if err == nil {
		_, err = doWorkflowAction(r, adminFor(r), r.PathValue("run"), req)
	}
	if err != nil {
		cs.renderWorkflow(w, r, "", err.Error(), workflowErrorStatus(err))
		return
	}
	http.Redirect(w, r, "/workflows/"+url.PathEscape(r.PathValue("run"))+"?done=wf-"+req.Action, http.StatusSeeOther)
}

// workflowErrorStatus is errorStatus for the workflow actions' errors.
func workflowErrorStatus(err error) int {
	var fe apiFieldError
	switch {
	case errors.As(err, &fe):
		return http.StatusBadRequest
	case workflowRefusal(err):
		return http.StatusConflict
	}
	return errorStatus(err)
}

// workflowRefusal reports whether err is a workflow action refused for
// the run's state.
func workflowRefusal(err error) bool {
	return errors.Is(err, workflow.ErrSkip) || errors.Is(err, workflow.ErrCancel) || errors.Is(err, workflow.ErrRerun) || errors.Is(err, workflow.ErrMark)
}
