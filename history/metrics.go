package history

import "github.com/prometheus/client_golang/prometheus"

var (
	recordsDesc = prometheus.NewDesc("shardflow_history_records_total",
		"History records by fate: written by the Writer, or dropped (buffer full, or left at stop).", []string{"result"}, nil)
	queuedDesc = prometheus.NewDesc("shardflow_history_queued_records",
		"History records waiting in the buffer to be written.", nil, nil)
	writeErrorsDesc = prometheus.NewDesc("shardflow_history_write_errors_total",
		"Failed history writes (each is retried; records are dropped only when the buffer is full).", nil, nil)
)

// Describe implements prometheus.Collector: register a Buffer to expose
//
//	shardflow_history_records_total{result="written|dropped"}  counter
//	shardflow_history_queued_records                           gauge
//	shardflow_history_write_errors_total                       counter
func (b *Buffer) Describe(ch chan<- *prometheus.Desc) {
	ch <- recordsDesc
	ch <- queuedDesc
	ch <- writeErrorsDesc
}

// Collect implements prometheus.Collector.
func (b *Buffer) Collect(ch chan<- prometheus.Metric) {
	s := b.Stats()
	ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(s.Written), "written")
	ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(s.Dropped), "dropped")
	ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(s.Queued))
	ch <- prometheus.MustNewConstMetric(writeErrorsDesc, prometheus.CounterValue, float64(s.WriteErrors))
}

var _ prometheus.Collector = (*Buffer)(nil)
