//go:build integration

package pipeline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// A live feed goes quiet. Without --idle-finalize its last
// window stays open however long the quiet lasts; with it, once the
// partition is idle the watermark follows the wall clock - allowed lateness,
// and the window is written, equal to the SQL oracle. An event arriving
// afterwards for that window is dead-lettered late: the documented trade-off.
func TestIdleFinalizeQuietLiveFeed(t *testing.T) {
	addr := harness.OnePartitionBroker(t)
	db := harness.FreshDB(t)
	clock := &harness.SkewClock{}
	ws := clock.Now().Truncate(5 * time.Minute) // the feed's last window: [ws, ws+5m)
	windowRows := func(start time.Time) int {
		rows := harness.Dump(t, db, fmt.Sprintf(`SELECT count(*) FROM delay_aggregates WHERE window_start = '%s'`, harness.Rfc(start)))
		var n int
		harness.Scan(t, rows[0], "[%d]", &n)
		return n
	}
	harness.ProduceToZero(t, addr,
		harness.Pred("a", "L1", "S1", "AT", 30, harness.Rfc(ws.Add(-4*time.Minute))),
		harness.Pred("b", "L1", "S2", "AT", 60, harness.Rfc(ws.Add(10*time.Second))),
		harness.Pred("c", "L2", "S1", "AT", -20, harness.Rfc(ws.Add(time.Minute))),
		harness.Pred("d", "L1", "S1", "AT", 90, harness.Rfc(ws.Add(2*time.Minute+30*time.Second))))

	// Off (the default): the event-time watermark, ws+30s, writes the window
	// before and never the last one.
	off := harness.RunInProcess(t, db, addr, clock, consumer.Config{})
	harness.WaitFor(t, time.Minute, "the window before the last one written",
		func() bool { return harness.StoredConsumed(t, db) == 4 && windowRows(ws.Add(-5*time.Minute)) == 4 })
	clock.Jump(10 * time.Minute) // far past idle timeout + lateness after the window's end
	idle := off.Cfg.Metrics.Idle.WithLabelValues(harness.PredictionsTopic, "0")
	harness.WaitFor(t, time.Minute, "the partition idle", func() bool { return harness.Value(idle) == 1 })
	commits := harness.Value(off.Cfg.Metrics.Commits)
	harness.WaitFor(t, time.Minute, "two commits while idle", func() bool { return harness.Value(off.Cfg.Metrics.Commits) >= commits+2 })
	if n := windowRows(ws); n != 0 {
		t.Fatalf("without --idle-finalize the last window has %d rows, want it open", n)
	}
	if got, want := harness.Value(off.Cfg.Metrics.Watermark), float64(ws.Add(30*time.Second).Unix()); got != want {
		t.Fatalf("watermark %v, want the max event time - lateness %v", got, want)
	}
	off.Stop(t)

	// On: the restart replays the last window's events (still open); once
	// the partition is idle again the watermark is wall clock - lateness.
	on := harness.RunInProcess(t, db, addr, clock, consumer.Config{IdleFinalize: true})
	consumed := on.Cfg.Metrics.Consumed.WithLabelValues(harness.PredictionsTopic)
	harness.WaitFor(t, time.Minute, "the replay of the last window", func() bool { return harness.Value(consumed) == 3 })
	clock.Jump(time.Minute) // the idle timeout (30s) passes
	harness.WaitFor(t, time.Minute, "the last window written", func() bool { return windowRows(ws) == 6 })
	harness.CheckOnce(t, db, addr, map[int64]string{})

	// The trade-off: an event for that window arriving now is late.
	harness.ProduceToZero(t, addr, harness.Pred("e", "L1", "S1", "AT", 1000, harness.Rfc(ws.Add(3*time.Minute))))
	harness.WaitFor(t, time.Minute, "the late event dead-lettered", func() bool { return harness.StoredConsumed(t, db) == 5 })
	harness.CheckOnce(t, db, addr, map[int64]string{4: store.ReasonLate})
	if sum := on.Stop(t); sum.DeadLetters[store.ReasonLate] != 1 || sum.Predictions != 3 {
		t.Fatalf("run with --idle-finalize: %d predictions, dead letters %v; want 3 and one late", sum.Predictions, sum.DeadLetters)
	}
}

// --idle-finalize over old data: a service started on empty topics moves
// its watermark with the wall clock, then a backfill of 2016 predictions
// arrives and every one is late. The log says why, once, naming the setting.
func TestIdleFinalizeOldDataWarns(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	run := harness.StartOvstream(t, nil, harness.RunArgs(db, addr, "--idle-finalize", "--metrics-addr", "127.0.0.1:0")...)
	ops := harness.OpsAddr(t, run)
	harness.WaitFor(t, time.Minute, "the watermark following the wall clock", func() bool {
		return harness.Scrape(t, ops)["ovstream_watermark_timestamp_seconds"] > float64(time.Now().Add(-time.Hour).Unix())
	})
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	harness.WaitFor(t, time.Minute, "every prediction late", func() bool {
		return harness.Scrape(t, ops)[`ovstream_late_events_total{topic="arrival_predictions"}`] == 4610
	})
	const warning = "a record is late under --idle-finalize"
	if n := strings.Count(run.Output(), warning); n != 1 || !strings.Contains(harness.LineWith(run, warning), "setting=--idle-finalize") {
		t.Errorf("%d warnings %q naming setting=--idle-finalize, want 1:\n%s", n, warning, harness.Tail(run.Output(), 20))
	}
	_ = run.Cmd.Process.Signal(harness.Sigterm)
	if code := run.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run after SIGTERM: exit %d\n%s", code, harness.Tail(run.Output(), 20))
	}
}
