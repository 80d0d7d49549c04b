package consumer

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/store"
)

// Metrics are the Prometheus series of a run. Every series exists from
// start-up, at zero for each label set known then (each assigned topic and
// partition, each dead-letter reason, each commit failure reason), so
// dashboards and alerts see it before the first event.
type Metrics struct {
	Consumed         *prometheus.CounterVec // ovstream_consumed_messages_total{topic}
	DeadLetters      *prometheus.CounterVec // ovstream_dead_letters_total{topic,reason}
	Late             *prometheus.CounterVec // ovstream_late_events_total{topic}
	WindowsFinalized prometheus.Counter     // ovstream_windows_finalized_total
	Commits          prometheus.Counter     // ovstream_commits_total
	CommitFailures   *prometheus.CounterVec // ovstream_commit_failures_total{reason}
	CommitDuration   prometheus.Histogram   // ovstream_commit_duration_seconds
	Uncommitted      prometheus.Gauge       // ovstream_uncommitted_messages
	Watermark        prometheus.Gauge       // ovstream_watermark_timestamp_seconds
	OpenWindows      prometheus.Gauge       // ovstream_open_windows
	Lag              *prometheus.GaugeVec   // ovstream_partition_lag_messages{topic,partition}
	Held             *prometheus.GaugeVec   // ovstream_partition_held_messages{topic,partition}
	Idle             *prometheus.GaugeVec   // ovstream_partition_idle{topic,partition}
	Fenced           prometheus.Gauge       // ovstream_fenced
	Standby          prometheus.Gauge       // ovstream_standby
	LastCommit       prometheus.Gauge       // ovstream_last_commit_timestamp_seconds
	KafkaCommitFails prometheus.Counter     // ovstream_kafka_offset_commit_failures_total
	MergePending     prometheus.Gauge       // ovstream_merge_pending_windows
	RetentionDropped prometheus.Counter     // ovstream_retention_dropped_partitions_total
	RetentionDeleted prometheus.Counter     // ovstream_retention_deleted_dead_letters_total
	ClosableAge      prometheus.GaugeFunc   // ovstream_closable_window_age_seconds (freshness.go)
	ClockSkew        prometheus.Gauge       // ovstream_clock_skew_seconds (clock.go)
	closableSince    atomic.Int64           // Unix ns the oldest closable window not yet written became closable; 0 = none
	all              []prometheus.Collector
}

// Commit failure reasons (label reason of ovstream_commit_failures_total).
const (
	FailRetryable = "retryable" // connection lost, serialization failure: retried
	FailAmbiguous = "ambiguous" // COMMIT's outcome unknown: positions re-read
	FailFenced    = "fenced"
	FailTerminal  = "terminal" // e.g. a missing table: the run stops
	FailRejected  = "rejected" // PostgreSQL refused rows: their records are dead-lettered on a resync
	// FailBehind: the database does not hold commits this instance made (a
	// failover to a replica that had not received them, a restore): the
	// positions are re-read and the lost work replayed (store.BehindError).
	FailBehind = "behind"
	// FailMergedPast: the split pipeline merged a window this instance still
	// held events of (they came on an idle partition): positions re-read.
	FailMergedPast = "merged_past"
	// FailNotSoleOwner: a commit of final rows found another instance owning
	// a partition of the pipeline (one was added): it starts again as a
	// split instance.
	FailNotSoleOwner = "not_sole_owner"
)

// NewMetrics creates the series and registers them with reg (nil = do not register).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Consumed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovstream_consumed_messages_total",
			Help: "Kafka records consumed, per topic."}, []string{"topic"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovstream_dead_letters_total",
			Help: "Records sent to dead_letters, per topic and reason (decode, future, late, rejected); a replay after a restart does not count them again."}, []string{"topic", "reason"}),
		Late: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovstream_late_events_total",
			Help: "Events whose window was already finalized when they arrived (also dead-lettered with reason late)."}, []string{"topic"}),
		WindowsFinalized: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovstream_windows_finalized_total",
			Help: "delay_aggregates rows written by committed transactions."}),
		Commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovstream_commits_total",
			Help: "Successful commit transactions."}),
		CommitFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovstream_commit_failures_total",
			Help: "Failed commit transactions, per reason (retryable, ambiguous, rejected, fenced, terminal)."}, []string{"reason"}),
		CommitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovstream_commit_duration_seconds",
			Help: "Duration of successful commit transactions, seconds.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		Uncommitted: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_uncommitted_messages",
			Help: "Records consumed since the last successful commit."}),
		Watermark: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_watermark_timestamp_seconds",
			Help: "The event-time watermark, Unix seconds (0 before the first event)."}),
		OpenWindows: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_open_windows",
			Help: "Tumbling windows held in memory (not yet finalized and committed)."}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovstream_partition_lag_messages",
			Help: "Records not yet read, per partition: the high water mark minus the consumed position (one past the last record read); NaN while the high water mark cannot be read."}, []string{"topic", "partition"}),
		Held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovstream_partition_held_messages",
			Help: "Records read but not yet committable, per partition: the consumed position minus the stored next offset (records in open windows, or waiting for a commit); a restart reads them again."}, []string{"topic", "partition"}),
		Idle: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovstream_partition_idle",
			Help: "1 when the partition is idle and does not hold the watermark, else 0."}, []string{"topic", "partition"}),
		Fenced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_fenced",
			Help: "1 once another instance claimed the pipeline and this one stopped writing."}),
		Standby: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_standby",
			Help: "1 while this instance waits as a standby for partitions a live instance holds, else 0."}),
		LastCommit: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_last_commit_timestamp_seconds",
			Help: "Wall time of the last successful commit by PostgreSQL's clock (this host's clock corrected by ovstream_clock_skew_seconds), Unix seconds."}),
		KafkaCommitFails: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovstream_kafka_offset_commit_failures_total",
			Help: "Failed commits of offsets to the Kafka consumer group (monitoring only, never fatal)."}),
		MergePending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_merge_pending_windows",
			Help: "Split pipeline: windows with partial aggregates waiting for every partition to pass them (merge lag); 0 otherwise."}),
		RetentionDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovstream_retention_dropped_partitions_total",
			Help: "delay_aggregates partitions (days) dropped by --retention."}),
		RetentionDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovstream_retention_deleted_dead_letters_total",
			Help: "Dead letters deleted by --dead-letter-retention."}),
		ClockSkew: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovstream_clock_skew_seconds",
			Help: "This host's clock minus PostgreSQL's clock_timestamp(), seconds (positive: the host is ahead), measured at start-up and with every heartbeat against the midpoint of the round trip."}),
	}
	m.ClosableAge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ovstream_closable_window_age_seconds",
		Help: "Freshness: seconds since the oldest window that is closable (the watermark passed its end) but not yet committed became closable, by its records' Kafka timestamps; 0 when every closable window is written."},
		func() float64 { return closableAge(m.closableSince.Load(), time.Now()) })
	for _, r := range []string{FailRetryable, FailAmbiguous, FailRejected, FailBehind, FailMergedPast, FailFenced, FailTerminal} {
		m.CommitFailures.WithLabelValues(r)
	}
	m.all = []prometheus.Collector{m.Consumed, m.DeadLetters, m.Late, m.WindowsFinalized, m.Commits, m.CommitFailures,
		m.CommitDuration, m.Uncommitted, m.Watermark, m.OpenWindows, m.Lag, m.Held, m.Idle, m.Fenced, m.Standby, m.LastCommit,
		m.KafkaCommitFails, m.MergePending, m.RetentionDropped, m.RetentionDeleted, m.ClosableAge, m.ClockSkew}
	if reg != nil {
		for _, c := range m.all {
			reg.MustRegister(c)
		}
	}
	return m
}

// assign creates the series of every label set of the assignment: zero,
// the lags unknown (NaN).
func (m *Metrics) assign(tps []aggregate.PartitionID) {
	for _, tp := range tps {
		m.Consumed.WithLabelValues(tp.Topic)
		m.Late.WithLabelValues(tp.Topic)
		for _, r := range []string{store.ReasonDecode, store.ReasonFuture, store.ReasonLate, store.ReasonRejected} {
			m.DeadLetters.WithLabelValues(tp.Topic, r)
		}
		p := strconv.Itoa(int(tp.Partition))
		m.Lag.WithLabelValues(tp.Topic, p).Set(math.NaN()) // unknown until the first reading of its high water mark
		m.Held.WithLabelValues(tp.Topic, p)
		m.Idle.WithLabelValues(tp.Topic, p)
	}
}

// partition sets tp's lag, held and idle gauges; an unknown lag (its high
// water mark could not be read) is NaN, never the last value.
func (m *Metrics) partition(tp aggregate.PartitionID, lag, held int64, known, idle bool) {
	p := strconv.Itoa(int(tp.Partition))
	m.Held.WithLabelValues(tp.Topic, p).Set(float64(held))
	v := math.NaN()
	if known {
		v = float64(lag)
	}
	m.Lag.WithLabelValues(tp.Topic, p).Set(v)
	v = 0.0
	if idle {
		v = 1
	}
	m.Idle.WithLabelValues(tp.Topic, p).Set(v)
}

// closable sets when the oldest closable window not yet written became
// closable (the zero time: none).
func (m *Metrics) closable(t time.Time) {
	if t.IsZero() {
		m.closableSince.Store(0)
		return
	}
	m.closableSince.Store(t.UnixNano())
}

// ClosableSince returns when the oldest closable window not yet written
// became closable, the zero time when every closable window is written.
func (m *Metrics) ClosableSince() time.Time {
	if ns := m.closableSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// watermark sets the watermark gauge; the zero time reads 0.
func (m *Metrics) watermark(t time.Time) {
	if t.IsZero() {
		m.Watermark.Set(0)
		return
	}
	m.Watermark.Set(float64(t.UnixNano()) / 1e9)
}

// Health is what /readyz needs from a run, safe for concurrent reads.
type Health struct {
	assigned   atomic.Bool
	hwUnknown  atomic.Int64           // partitions whose high water mark is unknown now
	hwSince    atomic.Int64           // Unix ns since when some partition's high water mark is unknown; 0 = none
	lastCommit atomic.Int64           // Unix ns of the last successful commit; 0 = none
	standby    atomic.Pointer[string] // whom a standby waits for; nil = not waiting
}

// Standby tells whether the run waits as a standby, and for whom
// ("9 partitions held by host:pid-nonce (since ..., heartbeat 1.2s ago)").
func (h *Health) Standby() (bool, string) {
	if s := h.standby.Load(); s != nil {
		return true, *s
	}
	return false, ""
}

// HighWaterGrace is how long a partition's high water mark may be unknown
// before /readyz says the instance is not ready: a reading goes out every
// second and fails within endOffsetsTimeout, so a shorter gap is one slow
// or failed reading, or the first one at start-up.
const HighWaterGrace = hwStale + pollInterval

// HighWatersUnknown returns how many assigned partitions' high water marks
// cannot be read now (their leader is down, stopped or moving), and since
// when one has been unknown (zero: all known).
func (h *Health) HighWatersUnknown() (int, time.Time) {
	n := int(h.hwUnknown.Load())
	if ns := h.hwSince.Load(); n > 0 && ns != 0 {
		return n, time.Unix(0, ns)
	}
	return 0, time.Time{}
}

// highWatersUnknown records n partitions with an unknown high water mark at now.
func (h *Health) highWatersUnknown(n int, now time.Time) {
	h.hwUnknown.Store(int64(n))
	switch {
	case n == 0:
		h.hwSince.Store(0)
	case h.hwSince.Load() == 0:
		h.hwSince.Store(now.UnixNano())
	}
}

// Assigned tells whether every partition was assigned and sought.
func (h *Health) Assigned() bool { return h.assigned.Load() }

// LastCommit returns the wall time of the last successful commit (zero if none).
func (h *Health) LastCommit() time.Time {
	if ns := h.lastCommit.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
