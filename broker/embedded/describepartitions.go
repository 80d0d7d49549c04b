package embedded

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfake answers DescribeTopicPartitions (KIP-966, key 75) with null
// EligibleLeaderReplicas and LastKnownELR. Kafka sends empty lists there
// when a partition has none (the schema, DescribeTopicPartitionsResponse.json,
// allows null, but Kafka's own Java AdminClient, which kafka-topics.sh and
// Flink's Kafka source use since Kafka 3.8, calls .stream() on them and fails
// with a NullPointerException). elrListener's connections rewrite each such
// answer with empty lists for the null ones; every other byte passes as it is.

// elrListener wraps each accepted connection in an elrConn.
type elrListener struct{ net.Listener }

func (l elrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &elrConn{Conn: c, pending: map[int32]int16{}}, nil
}

// elrConn follows the requests read (their header: size, key, version,
// correlation id) to know which responses answer DescribeTopicPartitions,
// and rewrites those as they are written. Reads and writes run in
// goroutines of their own: pending is shared under mu.
type elrConn struct {
	net.Conn

	mu      sync.Mutex
	pending map[int32]int16 // correlation id -> version of a DescribeTopicPartitions request

	// Read side: the header of the request being read, then its bytes to skip.
	rhead []byte
	rskip int

	// Write side: the header of the response being written, then either
	// its bytes to pass (wpass) or, for a DescribeTopicPartitions answer,
	// the frame collected so far (frame, wwant bytes still to come).
	whead   []byte
	wpass   int
	frame   []byte
	wwant   int
	version int16
}

// requestHead is a request's size (4 bytes), key (2), version (2) and
// correlation id (4).
const requestHead = 12

func (c *elrConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	b := p[:n]
	for len(b) > 0 {
		if c.rskip > 0 {
			k := min(c.rskip, len(b))
			c.rskip, b = c.rskip-k, b[k:]
			continue
		}
		k := min(requestHead-len(c.rhead), len(b))
		c.rhead, b = append(c.rhead, b[:k]...), b[k:]
		if len(c.rhead) < requestHead {
			break
		}
		size := int32(binary.BigEndian.Uint32(c.rhead))
		key := int16(binary.BigEndian.Uint16(c.rhead[4:]))
		if key == int16(kmsg.DescribeTopicPartitions) {
			c.mu.Lock()
			c.pending[int32(binary.BigEndian.Uint32(c.rhead[8:]))] = int16(binary.BigEndian.Uint16(c.rhead[6:]))
			c.mu.Unlock()
		}
		c.rskip, c.rhead = max(int(size)-(requestHead-4), 0), c.rhead[:0]
	}
	return n, err
}

// Write writes p, with each DescribeTopicPartitions answer in it rewritten,
// in one write to the connection: p itself while nothing in it changes.
func (c *elrConn) Write(p []byte) (int, error) {
	var out []byte           // what to write, once it is no longer p[:i]
	same := true             // the bytes to write so far are p[:i]
	diverge := func(j int) { // p[:j] is to be written as it is; what follows is out's
		if same {
			out, same = append(make([]byte, 0, len(p)+64), p[:j]...), false
		}
	}
	if len(c.whead) > 0 || c.frame != nil {
		diverge(0) // a header or a frame begun in an earlier write
	}
	hdrStart := -1 // where in p the header being read began; -1: in an earlier write
	for i := 0; i < len(p); {
		switch {
		case c.wpass > 0:
			k := min(c.wpass, len(p)-i)
			if !same {
				out = append(out, p[i:i+k]...)
			}
			c.wpass, i = c.wpass-k, i+k
		case c.frame != nil:
			k := min(c.wwant, len(p)-i)
			c.frame, c.wwant, i = append(c.frame, p[i:i+k]...), c.wwant-k, i+k
			if c.wwant > 0 {
				continue
			}
			filled, err := fillELR(c.frame, c.version)
			if err != nil {
				return 0, err
			}
			out, c.frame = append(out, filled...), nil
		default: // a response's size (4 bytes) and correlation id (4)
			if len(c.whead) == 0 {
				hdrStart = i
			}
			k := min(8-len(c.whead), len(p)-i)
			c.whead, i = append(c.whead, p[i:i+k]...), i+k
			if len(c.whead) < 8 {
				continue
			}
			size := int(binary.BigEndian.Uint32(c.whead))
			corr := int32(binary.BigEndian.Uint32(c.whead[4:]))
			c.mu.Lock()
			v, ok := c.pending[corr]
			delete(c.pending, corr)
			c.mu.Unlock()
			if ok {
				diverge(max(hdrStart, 0))
				c.frame, c.wwant, c.version = append([]byte(nil), c.whead...), size-4, v
			} else {
				if !same {
					out = append(out, c.whead...)
				}
				c.wpass = size - 4
			}
			c.whead, hdrStart = c.whead[:0], -1
		}
	}
	if len(c.whead) > 0 && hdrStart >= 0 {
		diverge(hdrStart) // a header cut by the end of p: written once it is whole
	}
	if same {
		out = p
	}
	if len(out) > 0 {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// fillELR returns the DescribeTopicPartitions response frame (size,
// correlation id, header tags, body) with an empty list in place of each
// null EligibleLeaderReplicas and LastKnownELR.
func fillELR(frame []byte, version int16) ([]byte, error) {
	r := kbin.Reader{Src: frame[8:]}
	for n := r.Uvarint(); n > 0 && r.Ok(); n-- { // the response header's tagged fields
		r.Uvarint()
		r.Span(int(r.Uvarint()))
	}
	if !r.Ok() {
		return nil, fmt.Errorf("embedded: DescribeTopicPartitions response header of %d bytes does not parse", len(frame))
	}
	head := frame[:len(frame)-len(r.Src)]
	resp := kmsg.NewPtrDescribeTopicPartitionsResponse()
	resp.SetVersion(version)
	if err := resp.ReadFrom(r.Src); err != nil {
		return nil, fmt.Errorf("embedded: DescribeTopicPartitions response: %w", err)
	}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			if p.EligibleLeaderReplicas == nil {
				p.EligibleLeaderReplicas = []int32{}
			}
			if p.LastKnownELR == nil {
				p.LastKnownELR = []int32{}
			}
		}
	}
	out := resp.AppendTo(append([]byte(nil), head...))
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
}
