//go:build integration

package ops

import (
	"bufio"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// `status` after a drain and after more records arrive; `dlq list` with its
// filters; `dlq replay` re-produces the original key and value byte for byte,
// marks the rows, and a second replay sends nothing again.
func TestOpsStatusAndDeadLetterTools(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	harness.ProduceLines(t, addr, harness.PredictionsTopic, harness.BadLines...)
	harness.Drain(t, db, addr, "--pipeline", "ops")

	s := harness.Status(t, db, addr, "ops")
	hw := harness.HighWaters(t, addr, nil, harness.PredictionsTopic, harness.PositionsTopic)
	// The drain released its partitions at the end and stopped its instance.
	if !s.Claimed || s.Epoch != 1 || s.Owner != "" || s.HeartbeatAt == nil ||
		time.Since(*s.HeartbeatAt) > time.Minute || s.Watermark == nil || len(s.Instances) != 0 {
		t.Errorf("pipeline: %+v", s)
	}
	newest := harness.Dump(t, db, `SELECT max(window_end) FROM delay_aggregates`)[0]
	if s.NewestWindowEnd == nil || fmt.Sprintf("[%s]", s.NewestWindowEnd.Format("2006-01-02 15:04:05 -0700 MST")) != newest {
		t.Errorf("newest window_end %v, table %s", s.NewestWindowEnd, newest)
	}
	if len(s.Partitions) != 9 || s.Lag() != 0 {
		t.Fatalf("%d partitions, total lag %d; want 9 and 0 after a drain", len(s.Partitions), s.Lag())
	}
	for _, p := range s.Partitions {
		k := fmt.Sprintf("%s/%d", p.Topic, p.Partition)
		if p.NextOffset == nil || *p.NextOffset != hw[k] || *p.HighWater != hw[k] || *p.LogStart != 0 || *p.Lag != 0 || p.UpdatedAt == nil {
			t.Errorf("%s: next %v, high water %v (want %d), log start %v, lag %v", k, p.NextOffset, p.HighWater, hw[k], p.LogStart, p.Lag)
		}
		if p.Owner != "" || p.Epoch != 1 || p.Lease != "released" {
			t.Errorf("%s: owner %q, epoch %d, lease %q; want released at epoch 1 after the drain", k, p.Owner, p.Epoch, p.Lease)
		}
	}
	if d := s.DeadLetters["decode"]; d.Total != 4 || d.Replayed != 0 || len(s.DeadLetters) != 1 {
		t.Errorf("dead letters %+v, want decode 4 (0 replayed)", s.DeadLetters)
	}
	// Ten more records: the lag is exactly ten.
	more := make([]string, 10)
	for i := range more {
		more[i] = fmt.Sprintf(`{"trip_id":"more-%d","line":"L","stop_id":"S","operator":"AT","delay_s":%d,"event_time":"2016-05-18T20:30:00Z"}`, i, i)
	}
	harness.ProduceLines(t, addr, harness.PredictionsTopic, more...)
	if s = harness.Status(t, db, addr, "ops"); s.Lag() != 10 {
		t.Errorf("total lag %d after 10 more records, want 10", s.Lag())
	}
	text, _, code := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", addr, "--pipeline", "ops")
	for _, want := range []string{"pipeline ops: epoch 1, owner none (released)", "arrival_predictions/0", "total lag: 10",
		"instances (lease 15s): none running", "dead letters: decode 4 (0 replayed);"} {
		if code != 0 || !strings.Contains(text, want) {
			t.Errorf("status (exit %d) does not say %q:\n%s", code, want, text)
		}
	}
	if text, errOut, code := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", addr, "--pipeline", "never"); code != 2 || text != "" ||
		!strings.HasPrefix(errOut, `ovstream status: no pipeline "never" in this database; known pipelines: "ops"`+"\n") {
		t.Errorf("status of an unknown pipeline: exit %d, stdout %q, stderr %q; want 2 naming it and the known ones", code, text, errOut)
	}

	// dlq list: every row, byte for byte in --json; filters.
	out, errOut, code := harness.RunCLI(t, nil, "dlq", "list", "--pipeline", "ops", "--json", "--database-url", db)
	if code != 0 {
		t.Fatalf("dlq list exited %d: %s", code, errOut)
	}
	type row struct {
		Topic, Reason, Error string
		Partition            int32
		Offset               int64
		Key, Value           []byte
		ReplayedAt           *time.Time `json:"replayed_at"`
		ReplayedTo           *string    `json:"replayed_to"`
	}
	parse := func(out string) []row {
		var rows []row
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r row
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("dlq list --json line %q: %v", sc.Text(), err)
			}
			rows = append(rows, r)
		}
		return rows
	}
	rows := parse(out)
	var values []string
	for _, r := range rows {
		values = append(values, string(r.Value))
		if r.Reason != "decode" || r.Error == "" || r.ReplayedAt != nil || r.ReplayedTo != nil {
			t.Errorf("row %+v", r)
		}
		if want := keyOf(string(r.Value)); string(r.Key) != want {
			t.Errorf("row %s/%d/%d key %q, want %q", r.Topic, r.Partition, r.Offset, r.Key, want)
		}
	}
	sort.Strings(values)
	wantValues := append([]string(nil), harness.BadLines...)
	sort.Strings(wantValues)
	if strings.Join(values, "\n") != strings.Join(wantValues, "\n") {
		t.Errorf("dlq list values:\n%s\nwant:\n%s", strings.Join(values, "\n"), strings.Join(wantValues, "\n"))
	}
	if out, _, _ := harness.RunCLI(t, nil, "dlq", "list", "--pipeline", "ops", "--json", "--limit", "2", "--reason", "decode", "--topic", harness.PredictionsTopic, "--database-url", db); len(parse(out)) != 2 {
		t.Errorf("dlq list --limit 2:\n%s", out)
	}
	if out, _, _ := harness.RunCLI(t, nil, "dlq", "list", "--pipeline", "ops", "--reason", "late", "--database-url", db); out != "0 dead letters\n" {
		t.Errorf("dlq list --reason late: %q", out)
	}
	if out, _, _ := harness.RunCLI(t, nil, "dlq", "list", "--pipeline", "ops", "--database-url", db); !strings.Contains(out, "value: not json at all\n") ||
		!strings.Contains(out, "key:   (null)") || !strings.HasSuffix(out, "4 dead letters\n") {
		t.Errorf("dlq list:\n%s", out)
	}
	if _, errOut, code := harness.RunCLI(t, nil, "dlq", "list", "--pipeline", "ops", "--reason", "nope", "--database-url", db); code != 2 || !strings.Contains(errOut, "want decode, future, late or rejected") {
		t.Errorf("dlq list --reason nope: exit %d, %s", code, errOut)
	}

	// dlq replay: three, then the rest, then nothing.
	const target = "dlq_replayed"
	harness.CreateTopic(t, addr, nil, target, 1)
	replay := func(extra ...string) string {
		out, errOut, code := harness.RunCLI(t, nil, append([]string{"dlq", "replay", "--pipeline", "ops", "--to", target, "--database-url", db, "--brokers", addr}, extra...)...)
		if code != 0 {
			t.Fatalf("dlq replay exited %d: %s%s", code, out, errOut)
		}
		return out
	}
	if out := replay("--limit", "3"); out != "replayed 3 dead letters to dlq_replayed\n" {
		t.Errorf("first replay: %q", out)
	}
	if out := replay(); out != "replayed 1 dead letters to dlq_replayed\n" {
		t.Errorf("second replay: %q", out)
	}
	if out := replay(); out != "replayed 0 dead letters to dlq_replayed\n" {
		t.Errorf("third replay: %q", out)
	}
	sent := harness.ReadTopic(t, addr, target)
	if len(sent) != 4 {
		t.Fatalf("%s holds %d records, want 4", target, len(sent))
	}
	byValue := map[string]row{}
	for _, r := range rows {
		byValue[string(r.Value)] = r
	}
	for _, m := range sent {
		r, ok := byValue[string(m.Value)]
		if !ok {
			t.Errorf("replayed value %q is no dead letter", m.Value)
			continue
		}
		if string(m.Key) != string(r.Key) || (m.Key == nil) != (r.Key == nil) {
			t.Errorf("replayed key %q (nil %t), want %q (nil %t)", m.Key, m.Key == nil, r.Key, r.Key == nil)
		}
		headers := map[string]string{}
		for _, h := range m.Headers {
			headers[string(h.Key)] = string(h.Value)
		}
		if want := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset); headers["ovstream-dlq-source"] != want || headers["ovstream-dlq-reason"] != "decode" {
			t.Errorf("headers %v, want source %s, reason decode", headers, want)
		}
		delete(byValue, string(m.Value))
	}
	if marked := harness.Dump(t, db, `SELECT count(*) FROM dead_letters WHERE replayed_to = 'dlq_replayed' AND replayed_at IS NOT NULL`); marked[0] != "[4]" {
		t.Errorf("rows marked replayed: %v, want 4", marked)
	}
	if s = harness.Status(t, db, addr, "ops"); s.DeadLetters["decode"].Replayed != 4 {
		t.Errorf("status dead letters %+v, want 4 replayed", s.DeadLetters)
	}
	if out, _, _ := harness.RunCLI(t, nil, "dlq", "list", "--pipeline", "ops", "--pending", "--database-url", db); out != "0 dead letters\n" {
		t.Errorf("dlq list --pending after replay: %q", out)
	}
}

// keyOf is the key produceLines gives a line: its trip_id, or none.
func keyOf(line string) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(line), &obj) != nil {
		return ""
	}
	var s string
	_ = json.Unmarshal(obj["trip_id"], &s)
	return s
}

// status shows the partitions of the pipeline's own topics only (recorded
// in pipelines.topics at claim), not every topic of the --topics default;
// and it says "unknown" for the lag it cannot read from Kafka, never 0.
func TestOpsStatusOwnTopicsAndUnknownLag(t *testing.T) {
	addr := harness.StartBroker(t)
	db := harness.FreshDB(t)
	harness.ProduceLines(t, addr, harness.PredictionsTopic,
		`{"trip_id":"t1","line":"L","stop_id":"S","operator":"OP","delay_s":10,"event_time":"2016-05-18T20:30:00Z"}`,
		`{"trip_id":"t2","line":"L","stop_id":"S","operator":"OP","delay_s":20,"event_time":"2016-05-18T20:31:00Z"}`)
	harness.Drain(t, db, addr, "--pipeline", "predonly", "--topics", harness.PredictionsTopic+",")
	if got := harness.Dump(t, db, `SELECT topics FROM pipelines WHERE name = 'predonly'`); strings.Join(got, "") != "[[arrival_predictions]]" {
		t.Errorf("pipelines.topics %v, want [arrival_predictions]", got)
	}
	s := harness.Status(t, db, addr, "predonly")
	if len(s.Partitions) != 6 || s.Lag() != 0 {
		t.Errorf("%d partitions, total lag %d; want the 6 of arrival_predictions and 0", len(s.Partitions), s.Lag())
	}
	for _, p := range s.Partitions {
		if p.Topic != harness.PredictionsTopic {
			t.Errorf("status shows %s/%d, a topic pipeline predonly never reads", p.Topic, p.Partition)
		}
	}

	// Kafka unreachable: exit 1, the lag is unknown, never 0.
	out, errOut, code := harness.RunCLI(t, nil, "status", "--json", "--database-url", db, "--brokers", "127.0.0.1:1", "--pipeline", "predonly")
	var u harness.StatusJSON
	if err := json.Unmarshal([]byte(out), &u); err != nil || code != 1 {
		t.Fatalf("status --json without Kafka: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if u.TotalLag != nil || len(u.Partitions) != 6 {
		t.Errorf("without Kafka: total lag %v, %d partitions; want null and 6", u.TotalLag, len(u.Partitions))
	}
	for _, p := range u.Partitions {
		if p.Lag != nil || p.NextOffset == nil {
			t.Errorf("without Kafka %s/%d: lag %v, next offset %v; want null and the stored one", p.Topic, p.Partition, p.Lag, p.NextOffset)
		}
	}
	text, _, code := harness.RunCLI(t, nil, "status", "--database-url", db, "--brokers", "127.0.0.1:1", "--pipeline", "predonly")
	if code != 1 || !strings.Contains(text, "total lag: unknown") || strings.Contains(text, "total lag: 0") {
		t.Errorf("status without Kafka (exit %d) does not say the lag is unknown:\n%s", code, text)
	}
}
