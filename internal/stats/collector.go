package stats

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RunDurationBuckets are the buckets, in seconds, of
// shardflow_run_duration_seconds: from 10 ms to one hour, since a dataflow
// run may drain a backlog for a long time.
var RunDurationBuckets = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Collector is a prometheus.Collector of the jobs hosted by one server:
//
//	shardflow_items_processed_total{job,result="success|failure"}  counter, from each job's Counter
//	shardflow_runs_total{job,result="success|failure"}             counter, from ObserveRun
//	shardflow_run_duration_seconds{job}                            histogram, from ObserveRun
//	shardflow_reported_errors_total{job}                           counter, from ObserveReportedError
//	shardflow_last_run_timestamp_seconds{job}                      gauge, end of the last run
//	shardflow_last_success_timestamp_seconds{job}                  gauge, end of the last run without error
//	shardflow_item_last_success_timestamp_seconds{job,item}        gauge, end of the item's last run without failure
//	shardflow_item_run_errors_total{job,item}                      counter, runs of the item that ended in an error (ObserveItemRun)
//	shardflow_item_consecutive_failed_runs{job,item}               gauge, runs of the item in a row on this server that ended in an error; 0 after one that did not
//
// Every metric carries the constant label server. Item counts are read from
// the Counters at scrape time, so the pipeline's hot path pays nothing more;
// run metrics are fed by the Node through ObserveRun once per run. A job's
// metrics appear once it is tracked or observed and disappear when it is
// forgotten. All methods are safe for concurrent use.
type Collector struct {
	items, runs, duration, lastRun, lastSuccess, itemLastSuccess, reported *prometheus.Desc
	itemErrors, itemConsecutive                                            *prometheus.Desc

	now func() time.Time // end time of observed runs; time.Now but in tests

	mu   sync.Mutex
	jobs map[string]*jobMetrics
}

type jobMetrics struct {
	counter          *Counter
	runsOK, runsFail uint64
	reported         uint64
	durCount         uint64
	durSum           float64
	durBuckets       []uint64 // cumulative counts are built at scrape time
	lastRun, lastOK  time.Time
	itemOK           map[int]time.Time // item -> end of its last run without failure
	itemRuns         map[int]*itemRuns // item -> its run errors, once it has run
}

// itemRuns are one item's run errors on this server.
type itemRuns struct {
	errors      uint64
	consecutive int
}

// NewCollector returns a Collector whose metrics carry server as the
// server label. Register it with a prometheus.Registerer.
func NewCollector(server string) *Collector {
	labels := prometheus.Labels{"server": server}
	return &Collector{
		items: prometheus.NewDesc("shardflow_items_processed_total",
			"Items processed by dataflow jobs on this server, by outcome.", []string{"job", "result"}, labels),
		runs: prometheus.NewDesc("shardflow_runs_total",
			"Runs of dataflow jobs on this server, by outcome (failure: the run returned an error).", []string{"job", "result"}, labels),
		duration: prometheus.NewDesc("shardflow_run_duration_seconds",
			"Duration of runs of dataflow jobs on this server.", []string{"job"}, labels),
		lastRun: prometheus.NewDesc("shardflow_last_run_timestamp_seconds",
			"Unix time at which the job's last run on this server ended.", []string{"job"}, labels),
		lastSuccess: prometheus.NewDesc("shardflow_last_success_timestamp_seconds",
			"Unix time at which the job's last run without error on this server ended; alert when it grows old.", []string{"job"}, labels),
		itemLastSuccess: prometheus.NewDesc("shardflow_item_last_success_timestamp_seconds",
			"Unix time at which the shard item's last run on this server without a failure ended.", []string{"job", "item"}, labels),
		itemErrors: prometheus.NewDesc("shardflow_item_run_errors_total",
			"Runs of the shard item on this server that ended in an error (a failed fetch or commit, a timeout, a panic, a lost connection).", []string{"job", "item"}, labels),
		itemConsecutive: prometheus.NewDesc("shardflow_item_consecutive_failed_runs",
			"Runs of the shard item in a row on this server, up to its last, that ended in an error; 0 once one did not. Alert when it reaches N.", []string{"job", "item"}, labels),
		reported: prometheus.NewDesc("shardflow_reported_errors_total",
			"Errors runs of dataflow jobs on this server reported and went on from (Shard.ReportError), such as a source backing off a failing statement.", []string{"job"}, labels),
		now:  time.Now,
		jobs: make(map[string]*jobMetrics),
	}
}

func (c *Collector) job(name string) *jobMetrics {
	m, ok := c.jobs[name]
	if !ok {
		m = &jobMetrics{durBuckets: make([]uint64, len(RunDurationBuckets))}
		c.jobs[name] = m
	}
	return m
}

// Track exposes counter's totals as job's shardflow_items_processed_total.
// Tracking a job again replaces its counter.
func (c *Collector) Track(job string, counter *Counter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.job(job).counter = counter
}

// Forget drops all of job's metrics, for a job removed from this server.
func (c *Collector) Forget(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, job)
}

// ObserveRun records one run of job that took d and has just ended with err
// (nil for success): the Node calls it after each run.
func (c *Collector) ObserveRun(job string, d time.Duration, err error) {
	end, secs := c.now(), d.Seconds()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.job(job)
	if err != nil {
		m.runsFail++
	} else {
		m.runsOK++
		m.lastOK = end
	}
	m.lastRun = end
	m.durCount++
	m.durSum += secs
	if i, _ := slices.BinarySearch(RunDurationBuckets, secs); i < len(m.durBuckets) {
		m.durBuckets[i]++
	}
}

// ObserveItem records that job's shard item ran until end, ok when it
// counted no failure and had no error: the Node calls it for each item of
// each run. Only successes change shardflow_item_last_success_timestamp_seconds.
func (c *Collector) ObserveItem(job string, item int, end time.Time, ok bool) {
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.job(job)
	if m.itemOK == nil {
		m.itemOK = make(map[int]time.Time)
	}
	if end.After(m.itemOK[item]) {
		m.itemOK[item] = end
	}
}

// ObserveItemRun records whether a run of job's shard item ended in an
// error: the Node calls it for each item of each run. A failed run counts
// in shardflow_item_run_errors_total and adds one to the item's
// consecutive failed runs; a run without error sets them back to 0.
func (c *Collector) ObserveItemRun(job string, item int, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.job(job)
	if m.itemRuns == nil {
		m.itemRuns = make(map[int]*itemRuns)
	}
	r := m.itemRuns[item]
	if r == nil {
		r = &itemRuns{}
		m.itemRuns[item] = r
	}
	if failed {
		r.errors++
		r.consecutive++
		return
	}
	r.consecutive = 0
}

// ObserveReportedError counts one error a run of job reported and went on
// from (Shard.ReportError): the Node calls it.
func (c *Collector) ObserveReportedError(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.job(job).reported++
}

// Describe sends the descriptors of every metric the Collector exposes.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.items, c.runs, c.duration, c.lastRun, c.lastSuccess, c.itemLastSuccess, c.reported, c.itemErrors, c.itemConsecutive} {
		ch <- d
	}
}

// Collect sends the current values, jobs in name order.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(c.jobs)) {
		m := c.jobs[name]
		if m.counter != nil {
			s, f := m.counter.Snapshot()
			ch <- prometheus.MustNewConstMetric(c.items, prometheus.CounterValue, float64(s), name, "success")
			ch <- prometheus.MustNewConstMetric(c.items, prometheus.CounterValue, float64(f), name, "failure")
		}
		for _, item := range slices.Sorted(maps.Keys(m.itemOK)) {
			ch <- prometheus.MustNewConstMetric(c.itemLastSuccess, prometheus.GaugeValue, unixSeconds(m.itemOK[item]), name, strconv.Itoa(item))
		}
		for _, item := range slices.Sorted(maps.Keys(m.itemRuns)) {
			r, label := m.itemRuns[item], strconv.Itoa(item)
			ch <- prometheus.MustNewConstMetric(c.itemErrors, prometheus.CounterValue, float64(r.errors), name, label)
			ch <- prometheus.MustNewConstMetric(c.itemConsecutive, prometheus.GaugeValue, float64(r.consecutive), name, label)
		}
		if m.reported > 0 {
			ch <- prometheus.MustNewConstMetric(c.reported, prometheus.CounterValue, float64(m.reported), name)
		}
		if m.durCount == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.CounterValue, float64(m.runsOK), name, "success")
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.CounterValue, float64(m.runsFail), name, "failure")
		buckets := make(map[float64]uint64, len(RunDurationBuckets))
		var cum uint64
		for i, ub := range RunDurationBuckets {
			cum += m.durBuckets[i]
			buckets[ub] = cum
		}
		ch <- prometheus.MustNewConstHistogram(c.duration, m.durCount, m.durSum, buckets, name)
		ch <- prometheus.MustNewConstMetric(c.lastRun, prometheus.GaugeValue, unixSeconds(m.lastRun), name)
		if !m.lastOK.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, unixSeconds(m.lastOK), name)
		}
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
