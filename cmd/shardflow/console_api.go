package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardflow/shardflow/coord"
	"github.com/shardflow/shardflow/coord/jobconfig"
	"github.com/shardflow/shardflow/history"
)

// The console's JSON API, version 1 (docs/api.md): reads as open as the
// pages, actions behind the same authentication, cross-origin check and
// audit as the pages' buttons. Every error is a JSON apiError naming the
// request field at fault.

// apiPrefix is the path prefix of API version 1.
const apiPrefix = "/api/v1/"

// maxActionBody bounds an action request's body.
const maxActionBody = 64 << 10

// apiActions are the actions POST /api/v1/jobs/{job}/actions accepts.
var apiActions = []string{"trigger", "pause", "resume", "disable", "enable", "shutdown", "remove", "config"}

// routeAPI adds the API's routes to mux.
func (cs *consoleServer) routeAPI(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/jobs", cs.apiJobs)
	mux.HandleFunc("GET /api/v1/jobs/{job}", cs.apiJob)
	mux.HandleFunc("GET /api/v1/jobs/{job}/history", cs.apiHistory)
	mux.HandleFunc("POST /api/v1/jobs/{job}/actions", cs.requireAuth(cs.apiJobAction))
	mux.HandleFunc("GET /api/v1/workflows", cs.apiWorkflows)
	mux.HandleFunc(apiPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "path", fmt.Sprintf("no API endpoint %s %s; see docs/api.md", r.Method, r.URL.Path))
	})
}

// apiError is the body of every API error: the HTTP status, the request
// field at fault ("job", "server", "item", "action", "field", "value",
// "body", ...; empty when none is), and what to do.
type apiError struct {
	Status int    `json:"status"`
	Field  string `json:"field,omitempty"`
	Error  string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeAPIError(w http.ResponseWriter, code int, field, msg string) {
	writeJSON(w, code, apiError{Status: code, Field: field, Error: msg})
}

// writeAPIErr maps an Admin or request error to its status and field.
func writeAPIErr(w http.ResponseWriter, err error) {
	code, field := errorStatus(err), ""
	var fe *jobconfig.FieldError
	switch {
	case errors.Is(err, coord.ErrNoJob):
		field = "job"
	case errors.Is(err, coord.ErrNoServer):
		field = "server"
	case errors.Is(err, coord.ErrCannotRun):
		code, field = http.StatusConflict, "server"
	case errors.Is(err, coord.ErrNoItem):
		field = "item"
	case errors.As(err, &fe):
		field = "value"
	case errors.Is(err, coord.ErrBadConfig):
		field = "config"
	case errors.Is(err, coord.ErrNoWorkflowRun):
		field = "run"
	case workflowRefusal(err):
		code, field = http.StatusConflict, "run"
	}
	var fieldErr apiFieldError
	if errors.As(err, &fieldErr) {
		code, field = http.StatusBadRequest, fieldErr.field
	}
	writeAPIError(w, code, field, err.Error())
}

// apiFieldError is a bad request naming the request field at fault.
type apiFieldError struct{ field, msg string }

func (e apiFieldError) Error() string { return e.msg }

func badField(field, format string, args ...any) error {
	return apiFieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

// apiJobSummary is one job of GET /api/v1/jobs.
type apiJobSummary struct {
	Job              string     `json:"job"`
	Health           string     `json:"health"`
	HealthReasons    []string   `json:"healthReasons"`
	Leader           string     `json:"leader"`
	LiveServers      int        `json:"liveServers"`
	Servers          int        `json:"servers"`
	LastCompleteTime *time.Time `json:"lastCompleteTime"`
	NextFireTime     *time.Time `json:"nextFireTime"`
	TotalSuccess     int64      `json:"totalSuccessCount"`
	TotalFailure     int64      `json:"totalFailureCount"`
	ConfigError      string     `json:"configError"`
}

// apiJobList is the body of GET /api/v1/jobs.
type apiJobList struct {
	Namespace  string          `json:"namespace"`
	Jobs       []apiJobSummary `json:"jobs"`
	Unreadable []unreadableJob `json:"unreadable"`
}

func (cs *consoleServer) apiJobs(w http.ResponseWriter, r *http.Request) {
	doc, err := collectStatus(r.Context(), cs.admin, cs.namespace, "")
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	out := apiJobList{Namespace: doc.Namespace, Jobs: []apiJobSummary{}, Unreadable: doc.Unreadable}
	if out.Unreadable == nil {
		out.Unreadable = []unreadableJob{}
	}
	for _, js := range doc.Jobs {
		s := summarize(js)
		reasons := js.HealthReasons
		if reasons == nil {
			reasons = []string{}
		}
		out.Jobs = append(out.Jobs, apiJobSummary{Job: js.Job, Health: js.Health, HealthReasons: reasons, Leader: js.Leader,
			LiveServers: s.Live, Servers: s.Servers, LastCompleteTime: s.LastComplete, NextFireTime: js.NextFireTime,
			TotalSuccess: s.TotalSuccess, TotalFailure: s.TotalFailure, ConfigError: js.ConfigError})
	}
	writeJSON(w, http.StatusOK, out)
}

// apiJob is GET /api/v1/jobs/{job}: the job's status, as `status --json`
// prints each job.
func (cs *consoleServer) apiJob(w http.ResponseWriter, r *http.Request) {
	js, err := cs.admin.Status(r.Context(), r.PathValue("job"))
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, js)
}

// apiHistoryPage is the body of GET /api/v1/jobs/{job}/history.
type apiHistoryPage struct {
	Job  string           `json:"job"`
	Runs []history.Record `json:"runs"`
}

// apiHistory is GET /api/v1/jobs/{job}/history?item=N&server=ID&since=1h&limit=N:
// the job's recorded runs, newest first (default limit 100, at most 1000).
func (cs *consoleServer) apiHistory(w http.ResponseWriter, r *http.Request) {
	job := r.PathValue("job")
	if cs.historyReader == nil {
		writeAPIError(w, http.StatusNotFound, "history",
			"no execution history: this console was started without --history-pg; restart it with --history-pg DSN")
		return
	}
	f, err := historyFilter(job, r)
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	names, err := cs.admin.Jobs(r.Context())
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	if !slices.Contains(names, job) {
		writeAPIErr(w, fmt.Errorf("%w: %q in namespace %q", coord.ErrNoJob, job, cs.namespace))
		return
	}
	runs, err := cs.historyReader.Runs(r.Context(), f)
	if err != nil {
		writeAPIError(w, http.StatusBadGateway, "history", "history database: "+err.Error())
		return
	}
	if runs == nil {
		runs = []history.Record{}
	}
	writeJSON(w, http.StatusOK, apiHistoryPage{Job: job, Runs: runs})
}

// historyFilter reads the history query parameters, naming a bad one.
func historyFilter(job string, r *http.Request) (history.Filter, error) {
	q := r.URL.Query()
	f := history.Filter{Job: job, Server: q.Get("server"), Limit: 100}
	for name := range q {
		if name != "item" && name != "server" && name != "since" && name != "limit" {
			return f, badField(name, "unknown query parameter %q; history takes item, server, since and limit", name)
		}
	}
	if v := q.Get("item"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, badField("item", "item %q is not a shard item number (0, 1, ...)", v)
		}
		f.Item = &n
	}
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return f, badField("since", "since %q is not a positive duration such as 1h or 15m", v)
		}
		f.Since = time.Now().Add(-d)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return f, badField("limit", "limit %q must be a number from 1 to 1000", v)
		}
		f.Limit = n
	}
	return f, nil
}

// apiActionRequest is the body of POST /api/v1/jobs/{job}/actions.
type apiActionRequest struct {
	// Action is one of apiActions.
	Action string `json:"action"`
	// Server is the server acted on; "" for every server.
	Server string `json:"server,omitempty"`
	// Item is the shard item of a disable or enable.
	Item *int `json:"item,omitempty"`
	// Field and Value are a config action's field and new text.
	Field string  `json:"field,omitempty"`
	Value *string `json:"value,omitempty"`
}

// apiActionResult is the body of a successful action.
type apiActionResult struct {
	Job    string `json:"job"`
	Action string `json:"action"`
	Server string `json:"server,omitempty"`
	Item   *int   `json:"item,omitempty"`
	Field  string `json:"field,omitempty"`
	// Servers are the servers a trigger asked to run.
	Servers []string `json:"servers,omitempty"`
	// Actor is who the audit log records.
	Actor string `json:"actor"`
}

// apiJobAction is POST /api/v1/jobs/{job}/actions: one operator action,
// validated, performed through the Admin acting as the request's user
// (so it is audited), 200 with an apiActionResult.
func (cs *consoleServer) apiJobAction(w http.ResponseWriter, r *http.Request) {
	req, err := decodeAction(w, r)
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	admin, job := adminFor(r), r.PathValue("job")
	res := apiActionResult{Job: job, Action: req.Action, Server: req.Server, Item: req.Item, Field: req.Field, Actor: admin.Actor()}
	ctx := r.Context()
	switch req.Action {
	case "config":
		err = admin.SetConfig(ctx, job, req.Field, *req.Value)
	case "trigger":
		res.Servers, err = admin.TriggerServer(ctx, job, req.Server)
	default:
		item := noItem
		if req.Item != nil {
			item = *req.Item
		}
		err = doAction(ctx, admin, req.Action, job, req.Server, item)
	}
	if err != nil {
		writeAPIErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// decodeAction reads and checks an action request: JSON, one object of
// known fields, an action from apiActions with the fields it takes.
func decodeAction(w http.ResponseWriter, r *http.Request) (apiActionRequest, error) {
	var req apiActionRequest
	if err := decodeJSONBody(w, r, &req, "action, server, item, field and value"); err != nil {
		return req, err
	}
	if !slices.Contains(apiActions, req.Action) {
		return req, badField("action", "action %q is not one of %s", req.Action, strings.Join(apiActions, ", "))
	}
	if req.Item != nil && req.Action != "disable" && req.Action != "enable" {
		return req, badField("item", "item applies only to disable and enable")
	}
	if req.Item != nil && req.Server != "" {
		return req, badField("item", "item and server exclude each other: disable an item everywhere, or a server")
	}
	if req.Action == "config" {
		switch {
		case req.Server != "":
			return req, badField("server", "a config action applies to the job on every server; leave server out")
		case !slices.Contains(jobconfig.FieldNames(), req.Field):
			return req, badField("field", "field %q is not a config field; the fields are %s", req.Field, strings.Join(jobconfig.FieldNames(), ", "))
		case req.Value == nil:
			return req, badField("value", "a config action needs value, the field's new text")
		}
	} else if req.Field != "" || req.Value != nil {
		return req, badField("field", "field and value apply only to the config action")
	}
	return req, nil
}

// decodeJSONBody reads an action request's body into v: JSON, one object
// of v's fields (named in fields, for the error), at most maxActionBody.
func decodeJSONBody(w http.ResponseWriter, r *http.Request, v any, fields string) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return badField("Content-Type", "send the action as JSON with Content-Type: application/json, got %q", r.Header.Get("Content-Type"))
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxActionBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return badField("body", "the body exceeds %d bytes", maxActionBody)
		case errors.As(err, &typeErr):
			return badField(typeErr.Field, "%s must be a JSON %s, got %s", typeErr.Field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
			return badField(name, "unknown field %q; an action takes %s", name, fields)
		}
		return badField("body", "the body is not one JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badField("body", "the body holds more than one JSON value")
	}
	return nil
}

// jsonKind names a Go kind as JSON does.
func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"), strings.HasPrefix(k, "float"):
		return "number"
	case k == "ptr":
		return "number"
	}
	return k
}
