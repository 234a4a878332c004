package jobconfig

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Names of the config fields, as the children of /{namespace}/{job}/config
// and as `shardflow config set` takes them.
const (
	FieldJobName                          = "jobName" // the node path, not a config child
	FieldCron                             = "cron"
	FieldTimeZone                         = "timeZone"
	FieldShardingTotalCount               = "shardingTotalCount"
	FieldShardingItemParameters           = "shardingItemParameters"
	FieldJobParameter                     = "jobParameter"
	FieldMonitorExecution                 = "monitorExecution"
	FieldProcessCountIntervalSeconds      = "processCountIntervalSeconds"
	FieldConcurrentDataProcessThreadCount = "concurrentDataProcessThreadCount"
	FieldFetchDataCount                   = "fetchDataCount"
	FieldStreamingProcess                 = "streamingProcess"
	FieldPipelinedFetch                   = "pipelinedFetch"
	FieldMaxTimeDiffSeconds               = "maxTimeDiffSeconds"
	FieldFailover                         = "failover"
	FieldMisfire                          = "misfire"
	FieldDescription                      = "description"
	FieldOverwrite                        = "overwrite"
	FieldJobShardingStrategy              = "jobShardingStrategy"
	FieldDisabled                         = "disabled"
	FieldErrorPolicy                      = "errorPolicy"
	FieldReconcileIntervalSeconds         = "reconcileIntervalSeconds"
	FieldScriptCommandLine                = "scriptCommandLine"
	FieldHTTPURL                          = "httpUrl"
	FieldHTTPMethod                       = "httpMethod"
	FieldHTTPHeaders                      = "httpHeaders"
	FieldItemTimeout                      = "itemTimeout"
	FieldDependsOn                        = "dependsOn"
	FieldUpstreamFailure                  = "upstreamFailure"
	// FieldJobType is written by Fields and read by FromFields; it is fixed
	// when the job is first stored, so not settable.
	FieldJobType = "jobType"
)

type fieldKind int

const (
	kindString fieldKind = iota
	kindInt
	kindBool
	kindDuration
	kindSeconds // a time.Duration stored as whole seconds, ElasticJob's way
	kindList    // a []string stored as its elements joined by commas
)

// fieldSpec describes how one config field is encoded and decoded.
type fieldSpec struct {
	kind    fieldKind
	example string // a valid value, for fix hints
	str     func(*Config) *string
	num     func(*Config) *int
	flag    func(*Config) *bool
	negated bool // the stored Boolean is the negation of flag's: misfire is !DisableMisfire
	dur     func(*Config) *time.Duration
	list    func(*Config) *[]string
}

var fieldSpecs = map[string]fieldSpec{
	FieldCron:                             {kind: kindString, example: `"0/5 * * * * ?"`, str: func(c *Config) *string { return &c.Cron }},
	FieldTimeZone:                         {kind: kindString, example: `"Asia/Shanghai"`, str: func(c *Config) *string { return &c.TimeZone }},
	FieldShardingTotalCount:               {kind: kindInt, example: "8", num: func(c *Config) *int { return &c.ShardingTotalCount }},
	FieldShardingItemParameters:           {kind: kindString, example: `"0=Beijing,1=Shanghai"`, str: func(c *Config) *string { return &c.ShardingItemParameters }},
	FieldJobParameter:                     {kind: kindString, example: `"full"`, str: func(c *Config) *string { return &c.JobParameter }},
	FieldMonitorExecution:                 {kind: kindBool, example: "true", negated: true, flag: func(c *Config) *bool { return &c.DisableMonitorExecution }},
	FieldProcessCountIntervalSeconds:      {kind: kindSeconds, example: "300", dur: func(c *Config) *time.Duration { return &c.ProcessCountInterval }},
	FieldConcurrentDataProcessThreadCount: {kind: kindInt, example: "8", num: func(c *Config) *int { return &c.ConcurrentDataProcessThreadCount }},
	FieldFetchDataCount:                   {kind: kindInt, example: "100", num: func(c *Config) *int { return &c.FetchDataCount }},
	FieldStreamingProcess:                 {kind: kindBool, example: "false", flag: func(c *Config) *bool { return &c.StreamingProcess }},
	FieldPipelinedFetch:                   {kind: kindBool, example: "true", flag: func(c *Config) *bool { return &c.PipelinedFetch }},
	FieldMaxTimeDiffSeconds:               {kind: kindSeconds, example: "60", dur: func(c *Config) *time.Duration { return &c.MaxTimeDiff }},
	FieldFailover:                         {kind: kindBool, example: "true", flag: func(c *Config) *bool { return &c.Failover }},
	FieldMisfire:                          {kind: kindBool, example: "true", negated: true, flag: func(c *Config) *bool { return &c.DisableMisfire }},
	FieldDescription:                      {kind: kindString, example: `"nightly order sync"`, str: func(c *Config) *string { return &c.Description }},
	FieldOverwrite:                        {kind: kindBool, example: "false", flag: func(c *Config) *bool { return &c.Overwrite }},
	FieldJobShardingStrategy:              {kind: kindString, example: "average", str: func(c *Config) *string { return &c.ShardingStrategy }},
	FieldDisabled:                         {kind: kindBool, example: "false", flag: func(c *Config) *bool { return &c.Disabled }},
	FieldErrorPolicy:                      {kind: kindString, example: "log", str: func(c *Config) *string { return (*string)(&c.ErrorPolicy) }},
	FieldReconcileIntervalSeconds:         {kind: kindSeconds, example: "60", dur: func(c *Config) *time.Duration { return &c.ReconcileInterval }},
	FieldScriptCommandLine:                {kind: kindString, example: `"/opt/jobs/sync --full"`, str: func(c *Config) *string { return &c.Script.CommandLine }},
	FieldHTTPURL:                          {kind: kindString, example: `"https://jobs.internal/run"`, str: func(c *Config) *string { return &c.HTTP.URL }},
	FieldHTTPMethod:                       {kind: kindString, example: "POST", str: func(c *Config) *string { return &c.HTTP.Method }},
	FieldHTTPHeaders:                      {kind: kindString, example: `"Authorization: Bearer T"`, str: func(c *Config) *string { return &c.HTTP.Headers }},
	FieldItemTimeout:                      {kind: kindDuration, example: "30s", dur: func(c *Config) *time.Duration { return &c.ItemTimeout }},
	FieldDependsOn:                        {kind: kindList, example: "extract,load", list: func(c *Config) *[]string { return &c.DependsOn }},
	FieldUpstreamFailure:                  {kind: kindString, example: "run", str: func(c *Config) *string { return (*string)(&c.UpstreamFailure) }},
}

// FieldNames returns the names of the settable config fields, sorted: the
// names Fields writes except jobType, and the names SetField accepts.
func FieldNames() []string { return slices.Sorted(maps.Keys(fieldSpecs)) }

// Fields encodes c as the children of its config node: field name -> text.
// Every settable field is present, plus jobType (Type()); the job name is
// the node's path and is not included. Integers are decimal, Booleans "true"
// or "false", strings verbatim, ItemTimeout Go duration text, and the other
// durations whole seconds under ElasticJob's names (ProcessCountInterval as
// processCountIntervalSeconds). DisableMisfire and DisableMonitorExecution
// are stored as ElasticJob's misfire and monitorExecution, negated.
//
// Fields does not apply WithDefaults: a zero number or empty string is
// written as is and keeps meaning "the default" wherever the config is read,
// so a default that depends on the reading server (the worker count,
// 2 x GOMAXPROCS) stays per server.
func (c Config) Fields() map[string]string {
	m := make(map[string]string, len(fieldSpecs)+1)
	for name, spec := range fieldSpecs {
		m[name] = spec.get(&c)
	}
	m[FieldJobType] = string(c.Type())
	return m
}

func (s fieldSpec) get(c *Config) string {
	switch s.kind {
	case kindInt:
		return strconv.Itoa(*s.num(c))
	case kindDuration:
		return s.dur(c).String()
	case kindSeconds:
		return strconv.FormatInt(int64(*s.dur(c)/time.Second), 10)
	case kindBool:
		return strconv.FormatBool(*s.flag(c) != s.negated)
	case kindList:
		return strings.Join(*s.list(c), ",")
	default:
		return *s.str(c)
	}
}

// set decodes text into the field of c, or returns the problem.
func (s fieldSpec) set(c *Config, text string) (problem string) {
	switch s.kind {
	case kindInt:
		n, err := strconv.Atoi(strings.TrimSpace(text))
		if err != nil {
			return fmt.Sprintf("%q is not an integer", text)
		}
		*s.num(c) = n
	case kindDuration:
		text = strings.TrimSpace(text)
		if text == "" || text == "0" {
			*s.dur(c) = 0
			return ""
		}
		d, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Sprintf("%q is not a duration such as \"30s\"", text)
		}
		*s.dur(c) = d
	case kindSeconds:
		n, err := strconv.Atoi(strings.TrimSpace(text))
		if err != nil {
			return fmt.Sprintf("%q is not a whole number of seconds", text)
		}
		*s.dur(c) = time.Duration(n) * time.Second
	case kindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(text))
		if err != nil {
			return fmt.Sprintf("%q is not true or false", text)
		}
		*s.flag(c) = b != s.negated
	case kindList:
		*s.list(c) = ParseList(text)
	default:
		*s.str(c) = text
	}
	return ""
}

// FromFields decodes the children of a job's config node (as Fields writes
// them) into a Config named job. Missing fields keep their zero value,
// which means the default (see WithDefaults): a missing misfire or
// monitorExecution means true, as in ElasticJob. Unknown fields are ignored, so
// newer writers stay readable. A missing jobType means DATAFLOW; one that
// is not a known job type is refused.
//
// Every value that does not decode is reported, as a *FieldError naming
// the node ("config/shardingTotalCount") and the `shardflow config set`
// command that fixes it, joined with errors.Join; all wrap ErrInvalid. On
// error the returned Config is the zero value. FromFields does not call
// Validate.
func FromFields(job string, m map[string]string) (Config, error) {
	c := Config{JobName: job}
	var errs []error
	c.JobType = JobTypeDataflow
	if t, ok := m[FieldJobType]; ok {
		jt, known := ParseJobType(t)
		if !known {
			errs = append(errs, &FieldError{
				Field: FieldJobType, Node: "config/" + FieldJobType,
				Problem: jobTypeProblem(job, t),
				Fix:     "use another job name, or remove the other job first with `shardflow remove`",
			})
		}
		c.JobType = jt
	}
	for _, name := range FieldNames() {
		text, ok := m[name]
		if !ok {
			continue
		}
		spec := fieldSpecs[name]
		if p := spec.set(&c, text); p != "" {
			errs = append(errs, &FieldError{
				Field: name, Node: "config/" + name, Problem: "stored value " + p,
				Fix: fmt.Sprintf("set it with `shardflow config set --job %s %s %s`", job, name, spec.example),
			})
		}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// SetField returns c with one field, named as in the config node, set from
// its text form: the operator's `shardflow config set`. An unknown name,
// jobType, or a value that does not decode is an error. The result is then
// validated, and problems the edit introduces are errors (say, an item
// parameter above a lowered shardingTotalCount); problems c already had are
// not, so a broken stored config can be repaired one field at a time. All
// errors wrap ErrInvalid and name the field; on error c is returned
// unchanged.
func SetField(c Config, name, value string) (Config, error) {
	spec, ok := fieldSpecs[name]
	if !ok {
		fix := "settable fields are " + strings.Join(FieldNames(), ", ")
		if name == FieldJobType {
			return c, fieldErr(name, fix, "is fixed when the job is first stored (it is %s)", c.Type())
		}
		return c, fieldErr(name, fix, "is not a config field")
	}
	next := c
	if p := spec.set(&next, value); p != "" {
		return c, fieldErr(name, "give a value such as "+spec.example, "%s", p)
	}
	before := make(map[string]bool)
	for _, fe := range FieldErrors(c.Validate()) {
		before[fe.Error()] = true
	}
	var introduced []error
	for _, fe := range FieldErrors(next.Validate()) {
		if !before[fe.Error()] {
			introduced = append(introduced, fe)
		}
	}
	if len(introduced) > 0 {
		return c, errors.Join(introduced...)
	}
	return next, nil
}

// ParseList splits a list field's stored text ("a, b,c") into its
// elements, trimmed, empty ones dropped; nil for none.
func ParseList(text string) []string {
	var out []string
	for _, e := range strings.Split(text, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
