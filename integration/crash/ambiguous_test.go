//go:build integration

package crash

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovstream/ovstream/integration/harness"
)

// pgProxy forwards PostgreSQL connections and, when armed, breaks the next
// COMMIT of any of them at the exact point that makes it ambiguous for the
// client (docs/design.md "The commit", step 4):
//
//   - dropAfter: COMMIT reaches the server, which commits and answers; the
//     answer is swallowed and both connections are closed. The transaction
//     committed, the client cannot know.
//   - dropBefore: the connection is closed when the client sends COMMIT,
//     which never reaches the server: the transaction rolls back, the client
//     cannot know either.
//   - dropAfterWindows, dropBeforeWindows: dropAfter or dropBefore, at the
//     first COMMIT of a transaction that wrote delay_aggregates rows (in an
//     instance of a split pipeline, only a merge writes them).
//   - dropAfterDrainEnd, dropBeforeDrainEnd: dropAfter or dropBefore, at
//     the first COMMIT of a transaction that ended the drain of a split
//     pipeline (the merge of every window, once every partition was
//     drained, clears the drained flags).
//   - cutDrainEnd: the connection is closed when the client sends the
//     statement that ends the drain, inside the transaction: an error
//     before COMMIT, certain to have committed nothing.
//
// It speaks just enough of the protocol (version 3: an untyped startup
// message, then type byte + int32 length frames both ways; sslmode=disable).
type pgProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool     // setDown: every new connection is closed at once
	arm   string   // "" or one of the drop modes
	drops []string // what happened at each armed COMMIT
	// inspect, when set, is called at each armed COMMIT with the local port
	// of the proxy's connection to the server (pg_stat_activity.client_port):
	// with "open" before the COMMIT is forwarded or dropped (the
	// transaction is still open), and for dropAfter with "answered" once the
	// server answered, before the client's connection is closed.
	inspect func(stage string, serverPort int)
}

const (
	dropAfter          = "after"
	dropBefore         = "before"
	dropAfterWindows   = "after-windows"
	dropBeforeWindows  = "before-windows"
	dropAfterDrainEnd  = "after-drain-end"
	dropBeforeDrainEnd = "before-drain-end"
	cutDrainEnd        = "cut-drain-end"
)

// writesWindows tells whether a statement writes delay_aggregates rows
// (directly, or through the temporary table of the upsert).
func writesWindows(sql string) bool {
	sql = strings.ToLower(sql)
	return (strings.Contains(sql, "copy") || strings.Contains(sql, "insert")) &&
		(strings.Contains(sql, "delay_aggregates") || strings.Contains(sql, "ovs_windows"))
}

func startPgProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{t: t, ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

// url returns db (a postgres:// URL) with its host replaced by the proxy.
func (p *pgProxy) url(db string) string {
	u, err := url.Parse(db)
	if err != nil {
		p.t.Fatal(err)
	}
	u.Host = p.addr()
	return u.String()
}

// addr is the proxy's host:port.
func (p *pgProxy) addr() string { return p.ln.Addr().String() }

// setDown makes the proxy close every new connection at once, before it
// reaches the server (down), like a host that is gone; or forward them
// again. Connections open already are left alone.
func (p *pgProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// armNext makes the next COMMIT through the proxy fail the given way.
func (p *pgProxy) armNext(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arm = mode
}

// dropped returns what happened at the armed COMMITs so far.
func (p *pgProxy) dropped() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.drops...)
}

// endsDrain tells whether a statement ends the drain of a split pipeline
// (store/partials.go: the drained flags cleared after the last merge, with
// the merge's watermark). A claim clears the flags of the partitions it
// takes too (store/claim.go), without a watermark: not the end of a drain.
func endsDrain(sql string) bool {
	sql = strings.ToLower(sql)
	return strings.Contains(sql, "update stream_positions set watermark = greatest(watermark") &&
		strings.Contains(sql, "drained = false")
}

// take disarms the proxy and returns its mode, for the COMMIT of a
// transaction that wrote windows (or ended a drain) or not; the modes for
// such transactions wait for one.
func (p *pgProxy) take(windows, drainEnd bool) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	drop, waitFor, _ := strings.Cut(p.arm, "-") // e.g. after-windows: dropAfter, once windows are written
	if waitFor == "windows" && !windows || waitFor == "drain-end" && !drainEnd {
		return ""
	}
	p.arm = ""
	return drop
}

// cut disarms the proxy when it is armed with cutDrainEnd and tells so.
func (p *pgProxy) cut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.arm != cutDrainEnd {
		return false
	}
	p.arm = ""
	return true
}

func (p *pgProxy) record(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops = append(p.drops, s)
}

// call runs the inspect hook, if any, for the armed COMMIT on server.
func (p *pgProxy) call(stage string, server net.Conn) {
	p.mu.Lock()
	f := p.inspect
	p.mu.Unlock()
	if f != nil {
		f(stage, server.LocalAddr().(*net.TCPAddr).Port)
	}
}

// readMsg reads one frame: typed (type byte + length) or, for the startup
// message, untyped (length only, typ 0).
func readMsg(r io.Reader, typed bool) (typ byte, frame []byte, err error) {
	var hdr [5]byte
	h := hdr[:4]
	if typed {
		h = hdr[:5]
	}
	if _, err := io.ReadFull(r, h); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(h[len(h)-4:]))
	if n < 4 || n > 1<<30 {
		return 0, nil, fmt.Errorf("pgproxy: bad frame length %d", n)
	}
	frame = make([]byte, len(h)+n-4)
	copy(frame, h)
	if _, err := io.ReadFull(r, frame[len(h):]); err != nil {
		return 0, nil, err
	}
	if typed {
		typ = h[0]
	}
	return typ, frame, nil
}

func (p *pgProxy) serve(client net.Conn) {
	defer client.Close()
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	// Startup: untyped; answer SSL and GSS encryption requests with 'N'.
	for {
		_, frame, err := readMsg(client, false)
		if err != nil {
			return
		}
		if len(frame) == 8 {
			if code := binary.BigEndian.Uint32(frame[4:]); code == 80877103 || code == 80877104 {
				if _, err := client.Write([]byte{'N'}); err != nil {
					return
				}
				continue
			}
		}
		if _, err := server.Write(frame); err != nil {
			return
		}
		break
	}
	var (
		swallow   = make(chan struct{}) // closed: drop the server's answers
		answered  = make(chan string, 1)
		closeOnce sync.Once
	)
	shut := func() { closeOnce.Do(func() { client.Close(); server.Close() }) }
	go func() { // server -> client
		defer shut()
		tag := ""
		for {
			typ, frame, err := readMsg(server, true)
			if err != nil {
				return
			}
			select {
			case <-swallow:
				if typ == 'C' {
					tag = strings.TrimRight(string(frame[5:]), "\x00")
				}
				if typ == 'Z' {
					answered <- tag
					return
				}
				continue
			default:
			}
			if _, err := client.Write(frame); err != nil {
				return
			}
		}
	}()
	// The transaction in progress wrote windows, ended a drain. A statement
	// is seen when it is parsed (pgx prepares it once per connection).
	windows, drainEnd := false, false
	for { // client -> server
		typ, frame, err := readMsg(client, true)
		if err != nil {
			shut()
			return
		}
		if typ == 'Q' || typ == 'P' {
			windows = windows || writesWindows(string(frame[5:]))
			if endsDrain(string(frame[5:])) {
				drainEnd = true
				if p.cut() {
					p.record("cut: the statement that ends the drain not forwarded, connection closed")
					shut()
					return
				}
			}
		}
		if typ == 'Q' && strings.EqualFold(strings.TrimSpace(strings.TrimRight(string(frame[5:]), "\x00")), "commit") {
			mode := p.take(windows, drainEnd)
			windows, drainEnd = false, false
			if mode != "" {
				p.call("open", server)
			}
			switch mode {
			case dropBefore:
				p.record("before: COMMIT not forwarded, connection closed")
				shut()
				return
			case dropAfter:
				close(swallow)
				if _, err := server.Write(frame); err != nil {
					shut()
					return
				}
				select {
				case tag := <-answered:
					p.call("answered", server)
					p.record("after: the server answered " + tag + "; answer dropped, connection closed")
				case <-time.After(10 * time.Second):
					p.record("after: no answer from the server")
				}
				shut()
				return
			}
		}
		if _, err := server.Write(frame); err != nil {
			shut()
			return
		}
	}
}

// An ambiguous COMMIT: the service cannot know whether it committed. It
// reconnects, re-reads stream_positions, seeks again, and the result is
// still exact.
//
// Incarnation 1 reaches PostgreSQL through a proxy that breaks the
// connection at the COMMIT itself: three times after the server committed
// (the answer is lost) and twice before COMMIT reaches it (rolled back). Each
// time the service says the outcome is unknown, re-reads the positions and
// goes on. Incarnations 2 and 3 stop themselves at the before_commit and
// after_commit crash points while the test terminates their connection with
// pg_terminate_backend, then continue. Then the last records are produced
// and a drain through the proxy loses the answer of the COMMIT that writes
// the windows it finalizes at the end: records it consumed and counted in
// that very transaction; after the resync they must be neither counted again
// nor recorded as late. The tables are exact.
func TestAmbiguousCommit(t *testing.T) {
	t.Parallel()
	rng := harness.CrashSeed(t)
	ds := harness.Auckland2h(t)
	r := newRig(t, rng, ds, harness.StartBroker(t), 40)
	direct := r.db
	proxy := startPgProxy(t, harness.TestServerAddr(t))
	r.db = proxy.url(direct) // the service's URL; the checks below go direct
	p := r.start()
	r.db = direct
	r.feed.HoldBack(4) // for the drain at the end
	r.feed.Paced(200 * time.Millisecond)
	r.waitProgress(p, time.Minute, "before the first broken COMMIT")
	modes := []string{dropAfter, dropAfter, dropBefore, dropAfter, dropBefore}
	rng.Shuffle(len(modes), func(i, j int) { modes[i], modes[j] = modes[j], modes[i] })
	for i, mode := range modes {
		r.sleepOrExit(p, time.Duration(100+rng.IntN(500))*time.Millisecond, "before arming the proxy")
		resyncs := strings.Count(p.Output(), "COMMIT outcome unknown")
		proxy.armNext(mode)
		deadline := time.Now().Add(time.Minute)
		for len(proxy.dropped()) <= i || strings.Count(p.Output(), "COMMIT outcome unknown") == resyncs {
			r.alive(p, "after an ambiguous COMMIT")
			if time.Now().After(deadline) {
				t.Fatalf("COMMIT %d (%s): drops %v; the service did not report an unknown outcome; output:\n%s",
					i+1, mode, proxy.dropped(), harness.Tail(p.Output(), 40))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if d := proxy.dropped()[i]; mode == dropAfter && !strings.Contains(d, "answered COMMIT") {
			t.Fatalf("COMMIT %d: %s", i+1, d)
		}
		r.waitProgress(p, time.Minute, fmt.Sprintf("after ambiguous COMMIT %d (%s)", i+1, mode))
		r.mon.check(t, fmt.Sprintf("after ambiguous COMMIT %d (%s)", i+1, mode))
	}
	t.Logf("broken COMMITs: %q", proxy.dropped())
	r.stopGracefully(p)

	// The connection killed at the boundary, on either side of COMMIT.
	for _, point := range []string{"before_commit", "after_commit"} {
		k := 2 + rng.IntN(6)
		p = r.start(fmt.Sprintf("OVSTREAM_CRASHPOINT=%s:%d", point, k), "OVSTREAM_CRASHPOINT_ACTION=stop")
		waitCrashpointStop(t, p, point, k)
		failed := failures(p)
		if n := terminateBackends(t, r.db); n == 0 {
			t.Fatalf("%s: no connection of ovstream to terminate", point)
		}
		r.signal(p, syscall.SIGCONT)
		r.waitProgress(p, time.Minute, "after its connection was killed at "+point)
		if failures(p) == failed {
			t.Fatalf("%s: the service logged no failed and retried commit after its connection was killed; output:\n%s",
				point, harness.Tail(p.Output(), 40))
		}
		r.mon.check(t, "after the connection was killed at "+point)
		r.stopGracefully(p)
	}
	// The drain: records nobody consumed yet, and its windows-writing COMMIT
	// answered to nobody.
	r.feed.Release()
	r.feed.All(t)
	proxy.armNext(dropAfterWindows)
	resyncs := strings.Count(p.Output(), "COMMIT outcome unknown")
	d := harness.StartOvstream(t, nil, harness.RunArgs(proxy.url(direct), r.brokers, "--drain", "--flush-interval", "50ms",
		"--allowed-lateness", ds.Lateness)...)
	if code := d.Wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("drain through the proxy: exit %d; output:\n%s", code, harness.Tail(d.Output(), 40))
	}
	if drops := proxy.dropped(); len(drops) != len(modes)+1 || !strings.Contains(drops[len(modes)], "answered COMMIT") ||
		strings.Count(d.Output(), "COMMIT outcome unknown") != 1 {
		t.Fatalf("the drain's windows COMMIT was not made ambiguous: drops %q, %d resyncs before; drain output:\n%s",
			drops, resyncs, harness.Tail(d.Output(), 40))
	}
	r.mon.check(t, "after the drain with an ambiguous final COMMIT")
	r.finish(0)
}
