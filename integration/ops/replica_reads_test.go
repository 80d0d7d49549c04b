//go:build integration

package ops

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

func TestReplicaReads(t *testing.T) {
	t.Parallel()
	rs := harness.StartReplicaSet(t, false)
	db := rs.CreateDB()
	addr := harness.StartBroker(t)
	harness.ProduceFeeds(t, addr, harness.LoadFeeds(t, "AT", "../../testdata/auckland-20160519-peak10min"))
	harness.Drain(t, db, addr)
	rs.WaitReplayed()
	primary, standby := rs.Nodes[0].Url("ovs"), rs.Nodes[1].Url("ovs")
	preferStandby := strings.Replace(db, "target_session_attrs=read-write", "target_session_attrs=prefer-standby", 1)

	for _, args := range [][]string{
		{"--from", "2016-05-18", "--to", "2016-05-20"},
		{"--from", "2016-05-18", "--to", "2016-05-20", "--bucket", "5m", "--json"},
		{"--from", "2016-05-18", "--to", "2016-05-20", "--dimension", "station", "--csv"},
	} {
		want := string(harness.Report(t, primary, args...))
		for _, url := range []string{standby, preferStandby} {
			got, errOut, code := harness.RunCLI(t, nil, append([]string{"report", "--database-url", url}, args...)...)
			if code != 0 || got != want {
				t.Errorf("report %v on the standby (%s): exit %d %s\n%.1000s\nwant (the primary's):\n%.1000s", args, url, code, errOut, got, want)
			}
		}
	}
	want, _, _ := harness.RunCLI(t, nil, "status", "--json", "--database-url", primary, "--brokers", addr)
	if !strings.Contains(want, `"replica": null`) {
		t.Errorf("status on the primary names a replica:\n%s", want)
	}
	for _, url := range []string{standby, preferStandby} {
		out, errOut, code := harness.RunCLI(t, nil, "status", "--json", "--database-url", url, "--brokers", addr)
		var doc struct {
			Replica *struct {
				Server       string   `json:"server"`
				LastReplayAt *string  `json:"last_replay_at"`
				ReplayAgeS   *float64 `json:"replay_age_s"`
			} `json:"replica"`
		}
		_ = json.Unmarshal([]byte(out), &doc)
		if code != 0 || !sameStatus(out, want) || doc.Replica == nil || doc.Replica.Server != fmt.Sprintf("127.0.0.1:%d", rs.Nodes[1].Port) ||
			doc.Replica.LastReplayAt == nil || doc.Replica.ReplayAgeS == nil || *doc.Replica.ReplayAgeS < 0 {
			t.Errorf("status on the standby (%s): exit %d %s\n%.1500s\nwant the primary's but for a replica section naming the standby:\n%.1500s",
				url, code, errOut, out, want)
		}
	}
	// The stream held while the primary commits: the standby says how old
	// what it shows is.
	release := rs.Hold()
	harness.ExecSQL(t, primary, "CREATE TABLE replica_probe (n int); INSERT INTO replica_probe VALUES (1)")
	time.Sleep(1500 * time.Millisecond)
	out, errOut, code := harness.RunCLI(t, nil, "status", "--database-url", standby, "--brokers", addr)
	release()
	line := regexp.MustCompile(`replica: 127\.0\.0\.1:[0-9]+ is a hot standby \(read-only\): last replayed transaction committed \S+ \(([0-9.]+)s ago\).*`).FindStringSubmatch(out)
	var age float64
	if line != nil {
		age, _ = strconv.ParseFloat(line[1], 64)
	}
	if code != 0 || line == nil || age < 1.5 {
		t.Errorf("status on the standby held 1.5 s behind: exit %d %s\n%s\nwant a replica line at least 1.5 s old", code, errOut, out)
	} else {
		t.Logf("status on the standby held behind: %s", line[0])
	}
	rs.WaitReplayed()
	// api returns the answers of three APIs, and api/health's replica section.
	api := func(url string) (string, string) {
		srv := harness.StartOvstream(t, nil, "serve", "--database-url", url, "--addr", "127.0.0.1:0", "--pipeline", "ovstream")
		harness.WaitFor(t, 30*time.Second, "serve to start or end", func() bool {
			select {
			case <-srv.Done:
				return true
			default:
				return strings.Contains(srv.Output(), "dashboard of pipeline")
			}
		})
		select {
		case <-srv.Done:
			t.Errorf("serve on %s exited %d:\n%s", url, srv.Cmd.ProcessState.ExitCode(), harness.Tail(srv.Output(), 10))
			return "exited", ""
		default:
		}
		base := harness.Printed(t, srv, regexp.MustCompile(`dashboard of pipeline ovstream: (http://[0-9.:]+/)`))
		var all []string
		for _, path := range []string{"api/delay?from=2016-05-18T00:00:00Z&to=2016-05-20T00:00:00Z&bucket=5m", "api/top?day=2016-05-19&min_events=1", ""} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			all = append(all, resp.Status+" "+string(b))
		}
		resp, err := http.Get(base + "api/health?pipeline=ovstream")
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Replica json.RawMessage `json:"replica"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != 200 {
			t.Errorf("api/health on %s: %s, %v", url, resp.Status, err)
		}
		resp.Body.Close()
		_ = srv.Cmd.Process.Signal(harness.Sigterm)
		srv.Wait(t, 20*time.Second)
		t.Logf("serve on %s:\n%s", url, harness.Tail(srv.Output(), 10))
		return strings.Join(all, "\n"), string(h.Replica)
	}
	want, onPrimary := api(primary)
	got, onStandby := api(standby)
	if got != want {
		t.Errorf("serve on the standby differs:\n%.2000s\nwant:\n%.2000s", got, want)
	}
	// The health page says how far the replica lags: null on the primary.
	var rep struct {
		Server     string   `json:"server"`
		ReplayAgeS *float64 `json:"replay_age_s"`
	}
	_ = json.Unmarshal([]byte(onStandby), &rep)
	if onPrimary != "null" || rep.Server != fmt.Sprintf("127.0.0.1:%d", rs.Nodes[1].Port) || rep.ReplayAgeS == nil {
		t.Errorf("api/health replica: %s on the primary (want null), %s on the standby (want its server and replay age)", onPrimary, onStandby)
	}
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(rs.Nodes[1].Dir), "log"))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "read-only transaction") || strings.Contains(l, "ERROR") {
			t.Errorf("standby log: %s", l)
		}
	}
}

// statusMoving matches what differs between two `status --json` of one
// database: ages, and the replica section (null on the primary).
var statusMoving = regexp.MustCompile(`"(heartbeat_age_s|age_s)": [0-9.e+-]+|"replica": (null|\{[^}]*\})`)

// sameStatus compares two `status --json` outputs but for what moves.
func sameStatus(a, b string) bool {
	return statusMoving.ReplaceAllString(a, "") == statusMoving.ReplaceAllString(b, "")
}
