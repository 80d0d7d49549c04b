//go:build integration

package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ovstream/ovstream/integration/harness"
	"github.com/ovstream/ovstream/store"
)

// A leader change while run reads (KIP-320; the embedded broker's
// ElectLeaders moves the leader epoch of arrival_predictions/0 from 0 to 1,
// and fences fetches of epoch 0 as Kafka does): the partition's reader
// stops at the change, its position is validated against the new leader
// (OffsetForLeaderEpoch: epoch 0 ends where epoch 1 starts, at the position)
// and it reads on under epoch 1. Nothing is counted twice or lost: the
// result equals the SQL oracle, and the stored leader epoch is 1. The
// truncation itself (an end offset below the position) needs replicas:
// TestRealKafkaUncleanElectionTruncation.
func TestLeaderChangeWhileRunning(t *testing.T) {
	addr, db := harness.StartBroker(t), harness.FreshDB(t)
	start := time.Date(2016, 5, 18, 20, 0, 0, 0, time.UTC)
	harness.ProduceRecords(t, addr, harness.Events(0, 10, start)...)
	p := harness.StartOvstream(t, nil, harness.RunArgs(db, addr)...)
	harness.WaitFor(t, time.Minute, "run to consume the first 10 records", func() bool {
		return harness.StoredConsumedOf(t, db, "ovstream")["arrival_predictions/0"] == 10
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	res, err := kadm.NewClient(cl).ElectLeaders(context.Background(), kadm.ElectPreferredReplica, kadm.TopicsSet{harness.PredictionsTopic: {0: {}}})
	cl.Close()
	if err != nil || res[harness.PredictionsTopic][0].Err != nil {
		t.Fatalf("ElectLeaders: %v %+v", err, res)
	}
	harness.ProduceRecords(t, addr, harness.Events(10, 10, start.Add(10*time.Minute))...)
	harness.WaitFor(t, time.Minute, "run to consume the next 10 records", func() bool {
		return harness.StoredConsumedOf(t, db, "ovstream")["arrival_predictions/0"] == 20
	})
	_ = p.Cmd.Process.Signal(harness.Sigterm)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("run: exit %d, want 0:\n%s", code, p.Output())
	}
	want := "leader changed: position validated against the new leader (KIP-320); reading on\" partition=arrival_predictions/0 offset=10 leader_epoch=0 end_offset=10"
	if !strings.Contains(p.Output(), want) {
		t.Fatalf("run output does not say %q:\n%s", want, p.Output())
	}
	harness.Drain(t, db, addr)
	harness.LoadOracleInput(t, db, addr, harness.PredictionsTopic)
	harness.SameRows(t, "delay_aggregates vs SQL oracle", harness.Dump(t, db, harness.DumpAggregates), harness.Dump(t, db, harness.OracleAggregates))
	if got := harness.Dump(t, db, `SELECT next_offset, leader_epoch FROM stream_positions WHERE topic = 'arrival_predictions' AND partition = 0`); got[0] != "[20 1]" {
		t.Fatalf("stored (next_offset, leader_epoch) %v, want [20 1]", got)
	}
}

// stream_positions.leader_epoch goes with the next offset it was written
// with (migration 11): a commit stores it, a commit of the same offset
// without one keeps it, a commit of a higher offset replaces it (NULL when
// unknown), and a next_offset moved on by an instance of version 10 (its
// commit does not write the epoch) makes it unknown, so the epoch of an
// older offset is never validated against a newer one.
func TestStoreLeaderEpochFollowsNextOffset(t *testing.T) {
	ctx := harness.TestCtx(t)
	s, url, epoch := harness.OpenStore(t)
	commit := func(next int64, leaderEpoch int32) {
		t.Helper()
		ps := harness.At0(next)
		ps[0].LeaderEpoch = leaderEpoch
		if err := s.Commit(ctx, harness.WithSeqs(t, s, store.Batch{Pipeline: "p", Owner: harness.Owner0, Epoch: epoch, Positions: ps})); err != nil {
			t.Fatal(err)
		}
	}
	loaded := func() string {
		t.Helper()
		stored, err := s.LoadPositions(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d/%d", stored[harness.Tp0].NextOffset, stored[harness.Tp0].LeaderEpoch)
	}
	for _, c := range []struct {
		next  int64
		epoch int32
		want  string
	}{
		{10, 3, "10/3"},
		{10, -1, "10/3"}, // same offset, epoch unknown: kept
		{10, 4, "10/4"},
		{20, -1, "20/-1"}, // a higher offset without an epoch: unknown
		{30, 5, "30/5"},
		{25, 6, "30/5"}, // never backwards, the epoch with it
	} {
		commit(c.next, c.epoch)
		if got := loaded(); got != c.want {
			t.Fatalf("commit of next offset %d, leader epoch %d: loaded %s, want %s", c.next, c.epoch, got, c.want)
		}
	}
	// What a version-10 commit does to the row: next_offset on, the epoch untouched.
	harness.Query[int64](t, url, "WITH u AS (UPDATE stream_positions SET next_offset = 40, consumed_offset = 40 RETURNING 1) SELECT count(*) FROM u")
	if got := loaded(); got != "40/-1" {
		t.Fatalf("after a commit without the epoch: loaded %s, want 40/-1", got)
	}
	commit(40, 7)
	if got := loaded(); got != "40/7" {
		t.Fatalf("loaded %s, want 40/7", got)
	}
}
