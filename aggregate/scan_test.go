package aggregate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// slowMembers is decodeObject's slow path alone (utf8.Valid, json.Valid, the
// member scanner): the reference scanObject must agree with.
func slowMembers(value []byte, names []string) (*members, bool) {
	m := &members{names: names}
	if !utf8.Valid(value) || !json.Valid(value) {
		return nil, false
	}
	i := skipSpace(value, 0)
	if value[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(value, i)
		if i >= len(value) || value[i] == '}' {
			return m, true
		}
		if value[i] == ',' {
			i = skipSpace(value, i+1)
		}
		keyEnd := endOfValue(value, i)
		key := value[i:keyEnd]
		i = skipSpace(value, keyEnd)
		i = skipSpace(value, i+1)
		end := endOfValue(value, i)
		if idx := m.index(key); idx >= 0 {
			m.raw[idx] = value[i:end]
		}
		i = end
	}
}

// checkScan fails when scanObject accepts what the slow path rejects, or
// returns other members.
func checkScan(t *testing.T, value []byte, names []string) (accepted bool) {
	t.Helper()
	if !utf8.Valid(value) {
		return false
	}
	m := &members{names: names}
	fast := scanObject(value, m)
	ref, ok := slowMembers(value, names)
	if fast && !ok {
		t.Fatalf("scanObject accepts %q, which is not a valid JSON object", value)
	}
	if fast {
		for i := range names {
			if !bytes.Equal(m.raw[i], ref.raw[i]) || (m.raw[i] == nil) != (ref.raw[i] == nil) {
				t.Fatalf("%q: member %q: fast %q, slow %q", value, names[i], m.raw[i], ref.raw[i])
			}
			if m.plain[i] {
				// A plain string's bytes are its value: what encoding/json decodes.
				var s string
				if err := json.Unmarshal(m.raw[i], &s); err != nil || s != string(m.raw[i][1:len(m.raw[i])-1]) {
					t.Fatalf("%q: member %q marked plain, but decodes to %q (%v)", value, names[i], s, err)
				}
			}
		}
	}
	return fast
}

func TestScanObject(t *testing.T) {
	accept := []string{
		validPrediction, validPosition, `{}`, " \t\n{ }\r\n ",
		`{"trip_id" : "a" , "line":[1,{"x":"]}"}],"lat":{"a":{"b":[]}},"lon":-1.5e3 }`,
		`{"tr\u0069p_id":"escaped key","trip_id\n":"other","a\"b":"c","lat":"\"}"}`,
		`{"trip_id":"a","trip_id":"b"}`, `{"lat":true,"lon":false,"bearing":null}`,
		`{"a":[],"b":[[]],"c":{},"d":-0,"e":0.5,"f":1E+2,"g":1e-2,"h":"\ud800\/\b\f\n\r\t\\"}`,
		`{"delay_s":-30,"stop_sequence":12,"x":"` + "\x7f" + `é"}`,
	}
	for _, s := range accept {
		if !checkScan(t, []byte(s), predictionFields) {
			t.Errorf("scanObject rejects %q (slow path)", s)
		}
		checkScan(t, []byte(s), positionFields)
	}
	reject := []string{
		``, ` `, `null`, `[]`, `"x"`, `1`, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,"a":1}`,
		`{"a":1}{}`, `{"a":1} x`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-}`, `{"a":+1}`,
		`{"a":NaN}`, `{"a":Infinity}`, `{"a":tru}`, `{"a":truex}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`,
		`{"a":"\u12g4"}`, "{\"a\":\"\x01\"}", `{"a":[1 2]}`, `{"a":{"b" 1}}`, `{"a":{"b":1,}}`, `{'a':1}`,
		`{"a":1]`, `{"a":[}`, "\ufeff{}",
		`{"a":` + strings.Repeat("[", maxScanDepth+1) + strings.Repeat("]", maxScanDepth+1) + `}`, // deep: slow path
	}
	for _, s := range reject {
		if checkScan(t, []byte(s), predictionFields) {
			t.Errorf("scanObject accepts %q", s)
		}
	}
}

// FuzzScanObject: whatever scanObject accepts, the slow path accepts with the
// same members.
func FuzzScanObject(f *testing.F) {
	for _, s := range []string{validPrediction, validPosition, `{"a":[1,{"b":"\u00e9"}],"lat":-0.5e-3}`, `{"a":01}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		checkScan(t, value, predictionFields)
		checkScan(t, value, positionFields)
	})
}

func TestSmallInt(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"0", 0, true}, {"-0", 0, false}, {"12", 12, true}, {"-87882", -87882, true},
		{"999999999999999", 999999999999999, true}, {"1000000000000000", 0, false},
		{"1.0", 0, false}, {"1e3", 0, false}, {"-", 0, false}, {"", 0, false},
	} {
		n, ok := smallInt([]byte(c.in))
		if n != c.n || ok != c.ok {
			t.Errorf("smallInt(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
	}
}
