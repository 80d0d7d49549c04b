package aggregate

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// members holds the raw JSON values of the wanted members of one object.
type members struct {
	names []string
	raw   [13][]byte // raw[i] is the value of names[i]; nil when absent
	next  int        // get's guess: the decoders ask for the fields in the order of names
	guess int        // scanObject's guess: producers mostly write the members in that order too
	// plain[i] is true when raw[i] is a JSON string without escapes (so
	// without NUL): its value is its bytes. Only scanObject sets it.
	plain [13]bool
}

// get returns the raw JSON value of field, nil when absent.
func (m *members) get(field string) json.RawMessage {
	raw, _ := m.getString(field)
	return raw
}

// getString returns the raw JSON value of field, nil when absent, and whether
// it is a string without escapes.
func (m *members) getString(field string) (raw json.RawMessage, plain bool) {
	if i := m.next; i < len(m.names) && m.names[i] == field {
		m.next++
		return m.raw[i], m.plain[i]
	}
	for i, n := range m.names {
		if n == field {
			m.next = i + 1
			return m.raw[i], m.plain[i]
		}
	}
	return nil, false
}

// decodeObject checks that value is valid UTF-8 holding one JSON object and
// returns the raw values of its members named in names (at most 13). Member
// names match exactly (encoding/json's struct decoding would also match
// "Trip_ID"); of duplicate members the last wins, as with encoding/json.
func decodeObject(value []byte, names []string) (*members, error) {
	m := &members{}
	if err := decodeObjectInto(value, names, m); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeObjectInto is decodeObject filling m, a zero value the caller may
// keep on its stack. Valid objects, the normal case, take one pass
// (scanObject); the rest, and anything scanObject is unsure of, the slow
// path below, which words the error.
func decodeObjectInto(value []byte, names []string, m *members) error {
	m.names = names // m is the zero value: every caller declares it fresh
	if !utf8.Valid(value) {
		return &DecodeError{Reason: ReasonInvalidUTF8}
	}
	if scanObject(value, m) {
		return nil
	}
	*m = members{names: names}
	i := skipSpace(value, 0)
	if i == len(value) {
		return &DecodeError{Reason: ReasonNotObject}
	}
	if !json.Valid(value) {
		var raw json.RawMessage
		err := json.Unmarshal(value, &raw)
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return syntaxError(value, syn)
		}
		return &DecodeError{Reason: "invalid JSON"}
	}
	if value[i] != '{' {
		return &DecodeError{Reason: ReasonNotObject}
	}
	// value is valid JSON from here on; the bounds checks only make sure that a
	// mistake in this scanner cannot panic.
	i++
	for {
		i = skipSpace(value, i)
		if i >= len(value) || value[i] == '}' {
			return nil
		}
		if value[i] == ',' {
			i = skipSpace(value, i+1)
		}
		keyEnd := endOfValue(value, i)
		if keyEnd < 0 || value[i] != '"' {
			return &DecodeError{Reason: "invalid JSON"}
		}
		key := value[i:keyEnd]
		i = skipSpace(value, keyEnd)
		if i >= len(value) || value[i] != ':' {
			return &DecodeError{Reason: "invalid JSON"}
		}
		i = skipSpace(value, i+1)
		end := endOfValue(value, i)
		if end < 0 {
			return &DecodeError{Reason: "invalid JSON"}
		}
		if idx := m.index(key); idx >= 0 {
			m.raw[idx] = value[i:end]
		}
		i = end
	}
}

// index returns the position in m.names of the member whose raw JSON string
// key is key, or -1.
func (m *members) index(key []byte) int {
	name := key[1 : len(key)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		var s string
		if json.Unmarshal(key, &s) != nil {
			return -1
		}
		name = []byte(s)
	}
	for i, n := range m.names {
		if string(name) == n {
			return i
		}
	}
	return -1
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// endOfValue returns the index just past the JSON value that starts at b[i],
// or -1 if b ends first. b is valid JSON.
func endOfValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		for k := i + 1; k < len(b); k++ {
			switch b[k] {
			case '\\':
				k++
			case '"':
				return k + 1
			}
		}
		return -1
	case '{', '[':
		depth := 0
		for k := i; k < len(b); k++ {
			switch b[k] {
			case '"':
				end := endOfValue(b, k)
				if end < 0 {
					return -1
				}
				k = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return k + 1
				}
			}
		}
		return -1
	default: // number, true, false, null
		k := i
		for k < len(b) {
			switch b[k] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return k
			}
			k++
		}
		return k
	}
}
