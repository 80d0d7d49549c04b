//go:build integration

package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ovstream/ovstream/integration/harness"
)

// Freshness: ovstream_closable_window_age_seconds, status and the
// instance's row say since when the oldest window that is closable but not
// yet written has been closable, computed from the records produced: the
// latest, over the 9 partitions, of the Kafka timestamp of each one's first
// record at or past window end + allowed lateness. A lock on
// delay_aggregates holds the commit of the window [08:00, 08:05) while the
// run reads the records that close it; once the lock is gone the window is
// written and the age is 0 again.
func TestFreshnessClosableWindowAge(t *testing.T) {
	db, addr := harness.FreshDB(t), harness.StartBroker(t)
	// Records of the window on every partition: their timestamps do not
	// decide it (event times before 08:07 = 08:05 + the default 2m lateness).
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)
	var open []harness.Rec
	var openAt []time.Time
	parts := []struct {
		topic string
		n     int32
	}{{harness.PredictionsTopic, 6}, {harness.PositionsTopic, 3}}
	value := func(topic string, p int32, eventTime string) []byte {
		if topic == harness.PositionsTopic {
			return harness.Pos(fmt.Sprintf("v%d", p), -36.8, eventTime)
		}
		return harness.Pred(fmt.Sprintf("t%d", p), "L1", fmt.Sprintf("S%d", p), "AT", 30, eventTime)
	}
	for _, tp := range parts {
		for p := range tp.n {
			open = append(open, harness.Rec{Topic: tp.topic, Partition: p, Value: value(tp.topic, p, "2016-05-19T08:01:00Z")})
			openAt = append(openAt, base)
		}
	}
	harness.ProduceRecordsAt(t, addr, openAt, open...)
	run := harness.StartOvstream(t, nil, "run", "--database-url", db, "--brokers", addr, "--metrics-addr", "127.0.0.1:0",
		"--idle-timeout", "1h", "--flush-interval", "500ms", "--log-level", "debug") // idle partitions would close the window on the first of them
	ops := harness.OpsAddr(t, run)
	waitMetric(t, run, ops, "ovstream_commits_total", func(v float64) bool { return v >= 1 })
	if m := harness.Scrape(t, ops); m["ovstream_closable_window_age_seconds"] != 0 {
		t.Fatalf("before any window is closable: age %v, want 0", m["ovstream_closable_window_age_seconds"])
	}

	// Hold every commit that writes windows (EXCLUSIVE: reads such as
	// status go on).
	ctx := harness.TestCtx(t)
	lock, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE delay_aggregates IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// The closing records, each partition's first at or past 08:07: their
	// timestamps spread so that the latest is neither the first nor the last
	// partition produced; a later record of the same partition does not move it.
	var closing []harness.Rec
	var closingAt []time.Time
	var closable time.Time
	i := 0
	for _, tp := range parts {
		for p := range tp.n {
			ts := base.Add(time.Duration(60+(i*37)%97) * time.Second)
			closable = later(closable, ts)
			closing = append(closing, harness.Rec{Topic: tp.topic, Partition: p, Value: value(tp.topic, p, "2016-05-19T08:07:30Z")},
				harness.Rec{Topic: tp.topic, Partition: p, Value: value(tp.topic, p, "2016-05-19T08:08:00Z")})
			closingAt = append(closingAt, ts, base.Add(9*time.Minute))
			i++
		}
	}
	harness.ProduceRecordsAt(t, addr, closingAt, closing...)
	waitMetric(t, run, ops, "ovstream_closable_window_age_seconds", func(v float64) bool { return v > 0 })
	before := time.Now()
	age := harness.Scrape(t, ops)["ovstream_closable_window_age_seconds"]
	after := time.Now()
	if lo, hi := before.Sub(closable).Seconds(), after.Sub(closable).Seconds(); age < lo || age > hi {
		t.Errorf("ovstream_closable_window_age_seconds = %.3f, want wall clock - %s, in [%.3f, %.3f]", age,
			closable.Format(time.RFC3339Nano), lo, hi)
	}
	// status: the instance's row, by its heartbeat (renewed at once on a change).
	var st struct {
		ClosableAgeS float64 `json:"closable_age_s"`
		Instances    []struct {
			Owner         string     `json:"owner"`
			ClosableSince *time.Time `json:"closable_since"`
			ClosableAgeS  float64    `json:"closable_age_s"`
		} `json:"instances"`
	}
	statusNow := func() string {
		out, errOut, code := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", addr, "--pipeline", "ovstream", "--json")
		if code != 0 {
			t.Fatalf("status --json exited %d: %s", code, errOut)
		}
		st.Instances = nil
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		text, _, _ := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", addr, "--pipeline", "ovstream")
		return text
	}
	text := statusNow()
	if len(st.Instances) != 1 || st.Instances[0].ClosableSince == nil || !st.Instances[0].ClosableSince.Equal(closable) {
		t.Fatalf("status --json instances %+v, want one closable since %s", st.Instances, closable.Format(time.RFC3339Nano))
	}
	if in := st.Instances[0]; st.ClosableAgeS != in.ClosableAgeS || in.ClosableAgeS < age {
		t.Errorf("status closable_age_s %.3f, instance %.3f: want equal and at least the metric's %.3f (read before)", st.ClosableAgeS,
			in.ClosableAgeS, age)
	}
	if want := "a window closable since " + closable.UTC().Format(time.RFC3339Nano) + " is not yet written"; !strings.Contains(text, want) {
		t.Errorf("status does not say %q:\n%s", want, text)
	}

	// The commit goes through: the window is written, nothing is closable.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, run, ops, "ovstream_closable_window_age_seconds", func(v float64) bool { return v == 0 })
	var rows int
	harness.SqlRow(t, db, `SELECT count(*) FROM delay_aggregates WHERE window_end = '2016-05-19T08:05:00Z'`, &rows)
	if rows == 0 {
		t.Error("age 0 but the window [08:00, 08:05) is not written")
	}
	deadline := time.Now().Add(time.Minute)
	for text = statusNow(); len(st.Instances) != 1 || st.Instances[0].ClosableSince != nil; text = statusNow() {
		if time.Now().After(deadline) {
			t.Fatalf("status still shows a closable window after it was written:\n%s", text)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(text, "freshness: every closable window is written") {
		t.Errorf("status after the commit:\n%s", text)
	}
	if err := run.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := run.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run exited %d:\n%s", code, run.Output())
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitMetric waits until the sample name of run's /metrics satisfies ok (a
// minute at most; the run must not end meanwhile).
func waitMetric(t *testing.T, run *harness.Proc, ops, name string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v, has := harness.Scrape(t, ops)[name]
		if has && ok(v) {
			return
		}
		select {
		case <-run.Done:
			t.Fatalf("run ended while waiting for %s (last %v):\n%s", name, v, run.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after a minute:\n%s", name, v, run.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
