//go:build integration

package ops

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/consumer/groupoffsets"
	"github.com/ovstream/ovstream/integration/harness"
)

func sameOffsets(a, b map[string]int64) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Metrics from start-up at zero for every label set, their values after
// real data against the database, /healthz, /readyz (including a commit held
// up by a row lock while the database still answers), and the offsets
// mirrored into the Kafka consumer group named after the pipeline, as kadm
// reads them, up to the final commit after SIGTERM.
func TestOpsMetricsHealthAndGroupOffsets(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	const pipeline = "opsmetrics"
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", pipeline, "--metrics-addr", "127.0.0.1:0",
		"--idle-timeout", "1s", "--allowed-lateness", "2m", "--log-level", "info")...)
	ops := harness.OpsAddr(t, p)

	// Every series exists from start-up, at zero for each known label set.
	var m map[string]float64
	harness.WaitFor(t, 30*time.Second, "partitions assigned (lag series)", func() bool {
		m = harness.Scrape(t, ops)
		_, ok := m[`ovstream_partition_lag_messages{partition="2",topic="vehicle_positions"}`]
		return ok
	})
	zero := []string{"ovstream_windows_finalized_total", "ovstream_uncommitted_messages",
		"ovstream_watermark_timestamp_seconds", "ovstream_open_windows", "ovstream_fenced",
		"ovstream_kafka_offset_commit_failures_total"}
	for _, r := range []string{"ambiguous", "fenced", "retryable", "terminal"} {
		zero = append(zero, `ovstream_commit_failures_total{reason="`+r+`"}`)
	}
	parts := map[string]int{harness.PredictionsTopic: 6, harness.PositionsTopic: 3}
	for topic, n := range parts {
		zero = append(zero, `ovstream_consumed_messages_total{topic="`+topic+`"}`, `ovstream_late_events_total{topic="`+topic+`"}`)
		for _, r := range []string{"decode", "future", "late"} {
			zero = append(zero, `ovstream_dead_letters_total{reason="`+r+`",topic="`+topic+`"}`)
		}
		for i := 0; i < n; i++ {
			// Unknown (NaN) until the first reading of the high water
			// marks, then 0: the topics are empty.
			k := fmt.Sprintf(`ovstream_partition_lag_messages{partition="%d",topic="%s"}`, i, topic)
			if v, ok := m[k]; !ok || (v != 0 && !math.IsNaN(v)) {
				t.Errorf("at start-up %s = %v (present %t), want NaN or 0", k, v, ok)
			}
			if _, ok := m[fmt.Sprintf(`ovstream_partition_idle{partition="%d",topic="%s"}`, i, topic)]; !ok {
				t.Errorf("no ovstream_partition_idle series for %s/%d", topic, i)
			}
		}
	}
	for _, k := range zero {
		if v, ok := m[k]; !ok || v != 0 {
			t.Errorf("at start-up %s = %v (present %t), want 0", k, v, ok)
		}
	}
	for _, k := range []string{"ovstream_commits_total", "ovstream_commit_duration_seconds_count", "ovstream_last_commit_timestamp_seconds"} {
		if _, ok := m[k]; !ok {
			t.Errorf("at start-up: no %s", k)
		}
	}
	if code, body := harness.HttpGet(t, "http://"+ops+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	harness.WaitFor(t, 10*time.Second, "/readyz 200 with the high water marks read", func() bool {
		c, b := harness.HttpGet(t, "http://"+ops+"/readyz")
		return c == 200 && strings.Contains(b, "kafka: ok")
	})
	_, body := harness.HttpGet(t, "http://"+ops+"/readyz")
	for _, want := range []string{"ready\n", "database: ok", "partitions: assigned", "last commit: ", "kafka: ok"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz body %q does not say %q", body, want)
		}
	}

	// Real data and four bad records.
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	harness.ProduceLines(t, addr, harness.PredictionsTopic, harness.BadLines...)
	const total = 4610 + 4
	hw := harness.HighWaters(t, addr, nil, harness.PredictionsTopic, harness.PositionsTopic)
	harness.WaitFor(t, time.Minute, "every record consumed and committed", func() bool {
		m = harness.Scrape(t, ops)
		return m[`ovstream_consumed_messages_total{topic="arrival_predictions"}`] == total && m["ovstream_uncommitted_messages"] == 0
	})
	// Settled: lag, finalized windows and watermark agree with the database.
	var why string
	harness.WaitFor(t, 30*time.Second, "metrics equal the database", func() bool {
		m = harness.Scrape(t, ops)
		stored, consumed := harness.StoredNext(t, db, pipeline), harness.StoredConsumedOf(t, db, pipeline)
		for k, h := range hw {
			tp := strings.Split(k, "/")
			key := fmt.Sprintf(`ovstream_partition_lag_messages{partition="%s",topic="%s"}`, tp[1], tp[0])
			if m[key] != float64(h-consumed[k]) {
				why = fmt.Sprintf("%s = %v, database says %d - %d", key, m[key], h, consumed[k])
				return false
			}
			key = fmt.Sprintf(`ovstream_partition_held_messages{partition="%s",topic="%s"}`, tp[1], tp[0])
			if m[key] != float64(consumed[k]-stored[k]) {
				why = fmt.Sprintf("%s = %v, database says %d - %d", key, m[key], consumed[k], stored[k])
				return false
			}
		}
		// The idle gauges are refreshed with the high water marks, every
		// second: the empty partitions read idle from the first refresh
		// after the loop's first tick.
		for i := 0; i < parts[harness.PositionsTopic]; i++ {
			if k := fmt.Sprintf(`ovstream_partition_idle{partition="%d",topic="%s"}`, i, harness.PositionsTopic); m[k] != 1 {
				why = k + " is not 1 yet"
				return false
			}
		}
		// A window closes once a commit follows the watermark past its end
		// plus the allowed lateness: the settled state has one.
		if m["ovstream_windows_finalized_total"] < 1 {
			why = "no window finalized yet"
			return false
		}
		rows := harness.Dump(t, db, `SELECT count(*) FROM delay_aggregates`)[0]
		if fmt.Sprintf("[%d]", int64(m["ovstream_windows_finalized_total"])) != rows {
			why = fmt.Sprintf("windows finalized %v, table has %s", m["ovstream_windows_finalized_total"], rows)
			return false
		}
		wm := harness.Dump(t, db, `SELECT extract(epoch FROM min(watermark))::bigint FROM stream_positions WHERE pipeline = 'opsmetrics'`)[0]
		if fmt.Sprintf("[%d]", int64(m["ovstream_watermark_timestamp_seconds"])) != wm {
			why = fmt.Sprintf("watermark %v, database %s", m["ovstream_watermark_timestamp_seconds"], wm)
			return false
		}
		return true
	})
	if why != "" {
		t.Logf("settled after: %s", why)
	}
	exact := map[string]float64{
		`ovstream_consumed_messages_total{topic="arrival_predictions"}`:            4614,
		`ovstream_consumed_messages_total{topic="vehicle_positions"}`:              0,
		`ovstream_dead_letters_total{reason="decode",topic="arrival_predictions"}`: 4,
		`ovstream_dead_letters_total{reason="future",topic="arrival_predictions"}`: 0,
		`ovstream_commit_failures_total{reason="retryable"}`:                       0,
		`ovstream_fenced`: 0,
		`ovstream_kafka_offset_commit_failures_total`:                              0,
		`ovstream_uncommitted_messages`:                                            0,
		`ovstream_commit_duration_seconds_count`:                                   m["ovstream_commits_total"],
		`ovstream_commit_duration_seconds_bucket{le="+Inf"}`:                       m["ovstream_commits_total"],
		`ovstream_dead_letters_total{reason="decode",topic="vehicle_positions"}`:   0,
		`ovstream_partition_lag_messages{partition="0",topic="vehicle_positions"}`: 0,
		`ovstream_partition_idle{partition="0",topic="vehicle_positions"}`:         1, // empty: idle at once
		`ovstream_commit_failures_total{reason="terminal"}`:                        0,
		`ovstream_commit_failures_total{reason="ambiguous"}`:                       0,
		`ovstream_commit_failures_total{reason="fenced"}`:                          0,
		`ovstream_late_events_total{topic="vehicle_positions"}`:                    0,
		`ovstream_dead_letters_total{reason="future",topic="vehicle_positions"}`:   0,
		`ovstream_dead_letters_total{reason="late",topic="vehicle_positions"}`:     0,
		`ovstream_partition_lag_messages{partition="2",topic="vehicle_positions"}`: 0,
		`ovstream_partition_idle{partition="2",topic="vehicle_positions"}`:         1,
		`ovstream_partition_lag_messages{partition="1",topic="vehicle_positions"}`: 0,
		`ovstream_partition_idle{partition="1",topic="vehicle_positions"}`:         1,
	}
	// Late events (allowed lateness 2m on real, slightly out-of-order data):
	// the counters equal the dead letters of reason late.
	late := harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE reason = 'late'`)[0]
	for _, k := range []string{`ovstream_dead_letters_total{reason="late",topic="arrival_predictions"}`, `ovstream_late_events_total{topic="arrival_predictions"}`} {
		if fmt.Sprintf("[%d]", int64(m[k])) != late {
			t.Errorf("%s = %v, dead_letters has %s late rows", k, m[k], late)
		}
	}
	for k, want := range exact {
		if got, ok := m[k]; !ok || got != want {
			t.Errorf("%s = %v (present %t), want %v", k, got, ok, want)
		}
	}
	checkDeployMetricNames(t, m) // deploy/prometheus and deploy/grafana name only these
	if m["ovstream_commits_total"] < 1 || m["ovstream_windows_finalized_total"] < 1 || m["ovstream_open_windows"] < 1 {
		t.Errorf("commits %v, windows finalized %v, open windows %v: want each >= 1", m["ovstream_commits_total"],
			m["ovstream_windows_finalized_total"], m["ovstream_open_windows"])
	}
	if age := float64(time.Now().Unix()) - m["ovstream_last_commit_timestamp_seconds"]; age < -1 || age > 5 {
		t.Errorf("last commit timestamp is %v s old", age)
	}

	// The consumer group named after the pipeline holds the stored offsets.
	var offs map[string]int64
	var meta map[string]string
	harness.WaitFor(t, 10*time.Second, "kadm sees the stored offsets in group "+pipeline, func() bool {
		offs, meta = harness.GroupOffsets(t, addr, pipeline)
		return sameOffsets(offs, harness.StoredNext(t, db, pipeline))
	})
	if len(offs) != 9 || meta[harness.PredictionsTopic+"/0"] != groupoffsets.Metadata {
		t.Errorf("group offsets %v, metadata %q", offs, meta[harness.PredictionsTopic+"/0"])
	}

	// A commit held up (a row lock on the pipeline) while the database
	// answers: not ready after three flush intervals, ready again after.
	ctx := harness.OpsCtx(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM stream_positions WHERE pipeline = 'opsmetrics' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, "/readyz 503 while commits wait", func() bool {
		c, b := harness.HttpGet(t, "http://"+ops+"/readyz")
		body = b
		return c == 503
	})
	for _, want := range []string{"not ready\n", "database: ok", "partitions: assigned", "older than 3 flush intervals (300ms)"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz body %q does not say %q", body, want)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, "/readyz 200 again", func() bool { c, _ := harness.HttpGet(t, "http://"+ops+"/readyz"); return c == 200 })

	// SIGTERM: final commit, exit 0; the group holds the final positions.
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run exited %d after SIGTERM:\n%s", code, p.Output())
	}
	final := harness.StoredNext(t, db, pipeline)
	offs, _ = harness.GroupOffsets(t, addr, pipeline)
	if !sameOffsets(offs, final) {
		t.Errorf("after exit: group offsets %v, stored %v", offs, final)
	}
}

// Another client holds the consumer group of the pipeline's name, so the
// broker refuses ovstream's offset commits: they are logged once, counted in
// ovstream_kafka_offset_commit_failures_total, and the pipeline goes on.
func TestOpsGroupOffsetFailuresAreNotFatal(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	const pipeline = "opsbusy"
	ctx, cancel := context.WithCancel(harness.OpsCtx(t))
	member, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup(pipeline), kgo.ConsumeTopics(harness.PositionsTopic))
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			member.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-polled; member.Close() })
	adm := kadm.NewClient(member)
	harness.WaitFor(t, 30*time.Second, "a member in group "+pipeline, func() bool {
		gs, err := adm.DescribeGroups(ctx, pipeline)
		return err == nil && gs[pipeline].State == "Stable" && len(gs[pipeline].Members) == 1
	})

	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--pipeline", pipeline, "--metrics-addr", "127.0.0.1:0", "--log-level", "info")...)
	ops := harness.OpsAddr(t, p)
	var m map[string]float64
	harness.WaitFor(t, time.Minute, "every record committed despite refused group commits", func() bool {
		m = harness.Scrape(t, ops)
		return m[`ovstream_consumed_messages_total{topic="arrival_predictions"}`] == 4610 &&
			m["ovstream_uncommitted_messages"] == 0 && m["ovstream_kafka_offset_commit_failures_total"] >= 2
	})
	if c, body := harness.HttpGet(t, "http://"+ops+"/readyz"); c != 200 {
		t.Errorf("/readyz %d with group commits failing, want 200 (monitoring only):\n%s", c, body)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run exited %d:\n%s", code, p.Output())
	}
	out := p.Output()
	if n := strings.Count(out, "cannot commit offsets to the Kafka consumer group"); n != 1 {
		t.Errorf("the refused group commit was logged %d times at info level, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "UNKNOWN_MEMBER_ID") {
		t.Errorf("the log does not say why the broker refused:\n%s", out)
	}
	consumed := harness.Dump(t, db, `SELECT sum(consumed_offset)::bigint FROM stream_positions WHERE pipeline = 'opsbusy'`)
	if consumed[0] != "["+strconv.Itoa(4610)+"]" {
		t.Errorf("stored consumed offsets sum to %v, want 4610", consumed)
	}
}
