package dashboard

import (
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Live is what a running instance knows of itself, shown on the health
// page of the pipeline it runs (run --metrics-addr).
type Live struct {
	Pipeline    string         `json:"pipeline"`
	Owner       string         `json:"owner"`                   // host:pid-nonce
	Assigned    bool           `json:"assigned"`                // every partition assigned and sought
	Standby     string         `json:"standby,omitempty"`       // whom a standby waits for; "" = not waiting
	LastCommit  *time.Time     `json:"last_commit"`             // this instance's last successful commit
	Watermark   *time.Time     `json:"watermark"`               // its event-time watermark (in memory)
	OpenWindows float64        `json:"open_windows"`            // windows held in memory
	Uncommitted float64        `json:"uncommitted_messages"`    // records consumed since the last commit
	Lag         []PartitionLag `json:"partitions_lag"`          // its partitions' lag at the last poll of the high water marks
	MetricsErr  string         `json:"metrics_error,omitempty"` // the registry could not be read
}

// in moves the times into loc.
func (l *Live) in(loc *time.Location) {
	for _, t := range []*time.Time{l.LastCommit, l.Watermark} {
		if t != nil {
			*t = t.In(loc)
		}
	}
}

// LiveFunc returns the running instance's health now.
type LiveFunc func() Live

// HealthSource is what a run tells of itself (consumer.Health has it).
type HealthSource interface {
	Assigned() bool
	Standby() (bool, string)
	LastCommit() time.Time
}

// RunSource returns the LiveFunc of a run of pipeline by owner: its health
// h, and its gauges in g (ovstream_watermark_timestamp_seconds,
// ovstream_open_windows, ovstream_uncommitted_messages,
// ovstream_partition_lag_messages{topic,partition},
// ovstream_partition_held_messages{topic,partition}; consumer.NewMetrics).
func RunSource(pipeline, owner string, g prometheus.Gatherer, h HealthSource) LiveFunc {
	return func() Live {
		l := Live{Pipeline: pipeline, Owner: owner, Assigned: h.Assigned(), Lag: []PartitionLag{}}
		if standby, holders := h.Standby(); standby {
			l.Standby = holders
		}
		if t := h.LastCommit(); !t.IsZero() {
			l.LastCommit = &t
		}
		held := map[string]*int64{} // topic/partition -> its held gauge
		families, err := g.Gather()
		if err != nil {
			l.MetricsErr = err.Error()
		}
		for _, f := range families {
			switch f.GetName() {
			case "ovstream_watermark_timestamp_seconds":
				if v := gauge(f); v > 0 {
					sec, frac := math.Modf(v)
					t := time.Unix(int64(sec), int64(frac*1e9)).UTC().Round(time.Microsecond)
					l.Watermark = &t
				}
			case "ovstream_open_windows":
				l.OpenWindows = gauge(f)
			case "ovstream_uncommitted_messages":
				l.Uncommitted = gauge(f)
			case "ovstream_partition_lag_messages":
				for _, m := range f.GetMetric() {
					topic, part := label(m, "topic"), label(m, "partition")
					lag := int64(m.GetGauge().GetValue())
					l.Lag = append(l.Lag, PartitionLag{Partition: topic + "/" + part, Lag: &lag})
				}
			case "ovstream_partition_held_messages":
				for _, m := range f.GetMetric() {
					h := int64(m.GetGauge().GetValue())
					held[label(m, "topic")+"/"+label(m, "partition")] = &h
				}
			}
		}
		for i := range l.Lag {
			l.Lag[i].Held = held[l.Lag[i].Partition]
		}
		sort.Slice(l.Lag, func(i, j int) bool { return partitionLess(l.Lag[i].Partition, l.Lag[j].Partition) })
		return l
	}
}

func gauge(f *dto.MetricFamily) float64 {
	if ms := f.GetMetric(); len(ms) > 0 {
		return ms[0].GetGauge().GetValue()
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, p := range m.GetLabel() {
		if p.GetName() == name {
			return p.GetValue()
		}
	}
	return ""
}

// partitionLess orders topic/partition names by topic, then partition number.
func partitionLess(a, b string) bool {
	ta, pa := splitPartition(a)
	tb, pb := splitPartition(b)
	if ta != tb {
		return ta < tb
	}
	return pa < pb
}

func splitPartition(s string) (string, int) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			n, _ := strconv.Atoi(s[i+1:])
			return s[:i], n
		}
	}
	return s, 0
}
