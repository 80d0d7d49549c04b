//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/consumer"
	"github.com/ovstream/ovstream/store"
)

// A live feed goes quiet. Without --idle-finalize its last
// window stays open however long the quiet lasts; with it, once the
// partition is idle the watermark follows the wall clock - allowed lateness,
// and the window is written, equal to the SQL oracle. An event arriving
// afterwards for that window is dead-lettered late: the documented trade-off.
func TestIdleFinalizeQuietLiveFeed(t *testing.T) {
	addr := onePartitionBroker(t)
	db := freshDB(t)
	clock := &skewClock{}
	ws := clock.Now().Truncate(5 * time.Minute) // the feed's last window: [ws, ws+5m)
	windowRows := func(start time.Time) int {
		rows := dump(t, db, fmt.Sprintf(`SELECT count(*) FROM delay_aggregates WHERE window_start = '%s'`, rfc(start)))
		var n int
		scan(t, rows[0], "[%d]", &n)
		return n
	}
	produceToZero(t, addr,
		pred("a", "L1", "S1", "AT", 30, rfc(ws.Add(-4*time.Minute))),
		pred("b", "L1", "S2", "AT", 60, rfc(ws.Add(10*time.Second))),
		pred("c", "L2", "S1", "AT", -20, rfc(ws.Add(time.Minute))),
		pred("d", "L1", "S1", "AT", 90, rfc(ws.Add(2*time.Minute+30*time.Second))))

	// Off (the default): the event-time watermark, ws+30s, writes the window
	// before and never the last one.
	off := runInProcess(t, db, addr, clock, consumer.Config{})
	waitFor(t, time.Minute, "the window before the last one written",
		func() bool { return storedConsumed(t, db) == 4 && windowRows(ws.Add(-5*time.Minute)) == 4 })
	clock.jump(10 * time.Minute) // far past idle timeout + lateness after the window's end
	idle := off.cfg.Metrics.Idle.WithLabelValues(predictionsTopic, "0")
	waitFor(t, time.Minute, "the partition idle", func() bool { return value(idle) == 1 })
	commits := value(off.cfg.Metrics.Commits)
	waitFor(t, time.Minute, "two commits while idle", func() bool { return value(off.cfg.Metrics.Commits) >= commits+2 })
	if n := windowRows(ws); n != 0 {
		t.Fatalf("without --idle-finalize the last window has %d rows, want it open", n)
	}
	if got, want := value(off.cfg.Metrics.Watermark), float64(ws.Add(30*time.Second).Unix()); got != want {
		t.Fatalf("watermark %v, want the max event time - lateness %v", got, want)
	}
	off.stop(t)

	// On: the restart replays the last window's events (still open); once
	// the partition is idle again the watermark is wall clock - lateness.
	on := runInProcess(t, db, addr, clock, consumer.Config{IdleFinalize: true})
	consumed := on.cfg.Metrics.Consumed.WithLabelValues(predictionsTopic)
	waitFor(t, time.Minute, "the replay of the last window", func() bool { return value(consumed) == 3 })
	clock.jump(time.Minute) // the idle timeout (30s) passes
	waitFor(t, time.Minute, "the last window written", func() bool { return windowRows(ws) == 6 })
	checkOnce(t, db, addr, map[int64]string{})

	// The trade-off: an event for that window arriving now is late.
	produceToZero(t, addr, pred("e", "L1", "S1", "AT", 1000, rfc(ws.Add(3*time.Minute))))
	waitFor(t, time.Minute, "the late event dead-lettered", func() bool { return storedConsumed(t, db) == 5 })
	checkOnce(t, db, addr, map[int64]string{4: store.ReasonLate})
	if sum := on.stop(t); sum.DeadLetters[store.ReasonLate] != 1 || sum.Predictions != 3 {
		t.Fatalf("run with --idle-finalize: %d predictions, dead letters %v; want 3 and one late", sum.Predictions, sum.DeadLetters)
	}
}

// --idle-finalize over old data: a service started on empty topics moves
// its watermark with the wall clock, then a backfill of 2016 predictions
// arrives and every one is late. The log says why, once, naming the setting.
func TestIdleFinalizeOldDataWarns(t *testing.T) {
	addr, db := startBroker(t), freshDB(t)
	run := startOvstream(t, nil, runArgs(db, addr, "--idle-finalize", "--metrics-addr", "127.0.0.1:0")...)
	ops := opsAddr(t, run)
	waitFor(t, time.Minute, "the watermark following the wall clock", func() bool {
		return scrape(t, ops)["ovstream_watermark_timestamp_seconds"] > float64(time.Now().Add(-time.Hour).Unix())
	})
	produceFeeds(t, addr, loadFeeds(t, "AT", "../testdata/auckland-20160519-peak10min"))
	waitFor(t, time.Minute, "every prediction late", func() bool {
		return scrape(t, ops)[`ovstream_late_events_total{topic="arrival_predictions"}`] == 4610
	})
	const warning = "a record is late under --idle-finalize"
	if n := strings.Count(run.output(), warning); n != 1 || !strings.Contains(lineWith(run, warning), "setting=--idle-finalize") {
		t.Errorf("%d warnings %q naming setting=--idle-finalize, want 1:\n%s", n, warning, tail(run.output(), 20))
	}
	_ = run.cmd.Process.Signal(sigterm)
	if code := run.wait(t, time.Minute); code != 0 {
		t.Fatalf("run after SIGTERM: exit %d\n%s", code, tail(run.output(), 20))
	}
}
