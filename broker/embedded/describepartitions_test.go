package embedded

import (
	"bytes"
	"encoding/binary"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// recorder is a net.Conn whose reads come from in and whose writes go to out.
type recorder struct {
	net.Conn
	in     *bytes.Reader
	out    bytes.Buffer
	writes int
}

func (r *recorder) Read(p []byte) (int, error) { return r.in.Read(p) }
func (r *recorder) Write(p []byte) (int, error) {
	r.writes++
	return r.out.Write(p)
}

// frame is a response as kfake writes it: size, correlation id, an empty
// tag section when flexible, the body.
func frame(corr int32, resp kmsg.Response) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	if resp.IsFlexible() {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// request is a request's frame: size, key, version, correlation id, and a
// body of n bytes.
func request(key, version int16, corr int32, n int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+n))
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	return append(b, make([]byte, n)...)
}

// The connection rewrites the DescribeTopicPartitions answer only, and
// only its null ELR lists, however the requests and responses are cut into
// reads and writes (1, 3, 7 bytes at a time, or whole); other responses
// pass byte for byte, in one write when a write holds no answer to rewrite.
func TestELRConnFillsOnlyNullLists(t *testing.T) {
	dtp := kmsg.NewPtrDescribeTopicPartitionsResponse()
	for _, name := range []string{"a", "b"} {
		tp := kmsg.NewDescribeTopicPartitionsResponseTopic()
		tp.Topic = kmsg.StringPtr(name)
		for p := range int32(2) {
			sp := kmsg.NewDescribeTopicPartitionsResponseTopicPartition()
			sp.Partition, sp.Replicas, sp.ISR = p, []int32{0}, []int32{0}
			if name == "b" && p == 1 {
				sp.EligibleLeaderReplicas, sp.LastKnownELR = []int32{2}, []int32{3}
			}
			tp.Partitions = append(tp.Partitions, sp)
		}
		dtp.Topics = append(dtp.Topics, tp)
	}
	meta := kmsg.NewPtrMetadataResponse()
	meta.SetVersion(12)
	meta.Topics = []kmsg.MetadataResponseTopic{{Topic: kmsg.StringPtr("a")}}
	metaFrame := frame(8, meta)
	requests := slices.Concat(request(3, 12, 8, 40), request(75, 0, 7, 25), request(3, 12, 9, 3))
	responses := slices.Concat(metaFrame, frame(7, dtp), metaFrame)
	binary.BigEndian.PutUint32(responses[len(responses)-len(metaFrame)+4:], 9)

	for _, step := range []int{1, 3, 7, len(responses)} {
		rec := &recorder{in: bytes.NewReader(requests)}
		c := &elrConn{Conn: rec, pending: map[int32]int16{}}
		buf := make([]byte, step)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		for i := 0; i < len(responses); i += step {
			if n, err := c.Write(responses[i:min(i+step, len(responses))]); err != nil || n != min(step, len(responses)-i) {
				t.Fatalf("step %d: write: %d, %v", step, n, err)
			}
		}
		got := rec.out.Bytes()
		if !bytes.HasPrefix(got, metaFrame) || !bytes.HasSuffix(got, responses[len(responses)-len(metaFrame):]) {
			t.Fatalf("step %d: the metadata responses did not pass byte for byte", step)
		}
		mid := got[len(metaFrame) : len(got)-len(metaFrame)]
		if int(binary.BigEndian.Uint32(mid)) != len(mid)-4 || binary.BigEndian.Uint32(mid[4:]) != 7 || mid[8] != 0 {
			t.Fatalf("step %d: the rewritten frame's size, correlation id or tags are wrong: % x", step, mid[:9])
		}
		back := kmsg.NewPtrDescribeTopicPartitionsResponse()
		if err := back.ReadFrom(mid[9:]); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		var lists []string
		for _, tp := range back.Topics {
			for _, sp := range tp.Partitions {
				for _, l := range [][]int32{sp.EligibleLeaderReplicas, sp.LastKnownELR} {
					if l == nil {
						lists = append(lists, "null")
					} else {
						lists = append(lists, string(rune('0'+len(l))))
					}
				}
				if !slices.Equal(sp.Replicas, []int32{0}) || !slices.Equal(sp.ISR, []int32{0}) {
					t.Errorf("step %d: %s/%d: replicas %v, isr %v", step, *tp.Topic, sp.Partition, sp.Replicas, sp.ISR)
				}
			}
		}
		if want := "0 0 0 0 0 0 1 1"; strings.Join(lists, " ") != want {
			t.Errorf("step %d: ELR list lengths %v, want %s (the given ones kept)", step, lists, want)
		}
		if step == len(responses) && rec.writes != 1 {
			t.Errorf("one write of three responses made %d writes, want 1", rec.writes)
		}
	}
}
