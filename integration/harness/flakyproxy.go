//go:build integration

package harness

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovstream/ovstream/broker/embedded"
)

// flakyProxy is a TCP proxy on 127.0.0.1 for a flaky network: it adds a
// latency to every chunk in each direction (pipelined: throughput is kept,
// each byte arrives that much later) and resets connections on command
// (SO_LINGER 0, so the peer reads ECONNRESET): every open one (ResetAll),
// or the next n it accepts, at once (ResetNext).
type flakyProxy struct {
	t       testing.TB
	ln      net.Listener
	target  atomic.Pointer[string]
	latency atomic.Int64 // time.Duration
	refuse  atomic.Int64 // accepted connections still to reset at once
	mu      sync.Mutex
	conns   map[*net.TCPConn]bool
	resets  atomic.Int64 // connections reset so far
}

// StartFlakyProxy listens on a free port; setTarget names where it forwards.
func StartFlakyProxy(t testing.TB) *flakyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{t: t, ln: ln, conns: map[*net.TCPConn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.ResetAll()
	})
	return p
}

// StartBrokerBehind starts the embedded broker (6 + 3 partitions) behind p:
// it advertises p's address, so every client reaches it through p.
func StartBrokerBehind(t testing.TB, p *flakyProxy) {
	t.Helper()
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Advertised: p.Addr(),
		Topics: map[string]int32{PredictionsTopic: 6, PositionsTopic: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	p.setTarget(b.Addr())
}

// Addr is the proxy's listening address.
func (p *flakyProxy) Addr() string { return p.ln.Addr().String() }

func (p *flakyProxy) setTarget(addr string) { p.target.Store(&addr) }

// SetLatency delays every chunk the proxy forwards by d.
func (p *flakyProxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// ResetNext makes the proxy reset the next n connections it accepts.
func (p *flakyProxy) ResetNext(n int) { p.refuse.Store(int64(n)) }

// ResetCount is how many connections the proxy has reset.
func (p *flakyProxy) ResetCount() int64 { return p.resets.Load() }

func (p *flakyProxy) track(c *net.TCPConn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

// ResetAll resets every connection open now, on both sides.
func (p *flakyProxy) ResetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, on := range p.conns {
		if on {
			reset(c)
			p.resets.Add(1)
		}
		delete(p.conns, c)
	}
}

func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

func (p *flakyProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		client := c.(*net.TCPConn)
		if p.refuse.Add(-1) >= 0 {
			reset(client)
			p.resets.Add(1)
			continue
		}
		p.refuse.Store(0)
		target := p.target.Load()
		if target == nil {
			reset(client)
			continue
		}
		s, err := net.Dial("tcp", *target)
		if err != nil {
			reset(client)
			continue
		}
		server := s.(*net.TCPConn)
		p.track(client, true)
		p.track(server, true)
		go p.pipe(client, server)
		go p.pipe(server, client)
	}
}

// pipe copies from src to dst, each chunk delivered latency after it was
// read; when either side fails both are closed.
func (p *flakyProxy) pipe(src, dst *net.TCPConn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now().Add(time.Duration(p.latency.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	_ = src.Close()
	_ = dst.Close()
	for range q { // let the reader end
	}
	p.track(src, false)
	p.track(dst, false)
}
