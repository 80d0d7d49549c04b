package aggregate

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// present reports whether raw holds a value other than JSON null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

func requiredString(obj *members, field string) (string, error) {
	raw, plain := obj.getString(field)
	if !present(raw) {
		return "", &DecodeError{Field: field, Reason: ReasonMissing}
	}
	s, err := stringValue(raw, plain, field, ReasonNonEmptyString)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", &DecodeError{Field: field, Reason: ReasonNonEmptyString}
	}
	return s, idLength(s, field)
}

// optionalString returns "" for a missing or null field. Every optional
// string of the contract but the names is an id (MaxIDBytes).
func optionalString(obj *members, field string) (string, error) {
	raw, plain := obj.getString(field)
	if !present(raw) {
		return "", nil
	}
	s, err := stringValue(raw, plain, field, ReasonString)
	if err != nil {
		return "", err
	}
	return s, idLength(s, field)
}

// idLength refuses an id longer than MaxIDBytes.
func idLength(id, field string) error {
	if len(id) > MaxIDBytes {
		return &DecodeError{Field: field, Reason: ReasonIDTooLong}
	}
	return nil
}

// stringValue returns the value of the raw JSON string raw; plain says it
// holds no escapes (members.plain), so neither a NUL.
func stringValue(raw json.RawMessage, plain bool, field, wrongType string) (string, error) {
	if plain {
		return string(raw[1 : len(raw)-1]), nil
	}
	if raw[0] != '"' {
		return "", &DecodeError{Field: field, Reason: wrongType}
	}
	s, ok := unquote(raw)
	if !ok {
		return "", &DecodeError{Field: field, Reason: wrongType}
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", &DecodeError{Field: field, Reason: ReasonNUL}
	}
	return s, nil
}

// optionalName returns the bytes of the string member at index i of
// obj.names, nil when it is missing, null or "": an alias of the value when
// the JSON string has no escapes, else a copy. Longer than MaxNameBytes is
// an error.
func optionalName(obj *members, i int) ([]byte, error) {
	raw, plain, field := obj.raw[i], obj.plain[i], obj.names[i]
	if !present(raw) {
		return nil, nil
	}
	var b []byte
	if plain {
		b = raw[1 : len(raw)-1]
	} else {
		s, err := stringValue(raw, false, field, ReasonString)
		if err != nil {
			return nil, err
		}
		b = []byte(s)
	}
	if len(b) > MaxNameBytes {
		return nil, &DecodeError{Field: field, Reason: ReasonNameTooLong}
	}
	if len(b) == 0 {
		return nil, nil
	}
	return b, nil
}

func requiredNumber(obj *members, field string) (float64, error) {
	f, ok, err := optionalNumber(obj, field)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, &DecodeError{Field: field, Reason: ReasonMissing}
	}
	return f, nil
}

// optionalNumber returns ok=false for a missing or null field. A present value
// must be a JSON number (not a string) that is finite as a float64.
func optionalNumber(obj *members, field string) (float64, bool, error) {
	raw := obj.get(field)
	if !present(raw) {
		return 0, false, nil
	}
	if !isNumber(raw) {
		return 0, false, &DecodeError{Field: field, Reason: ReasonNotNumber}
	}
	if n, ok := smallInt(raw); ok {
		return float64(n), true, nil // exact: |n| < 10^15 < 2^53
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		// The JSON grammar already held, so the only failure is overflow.
		return 0, false, &DecodeError{Field: field, Reason: ReasonNotFinite}
	}
	return f, true, nil
}

// optionalInteger accepts a JSON number with an integral value in int64 range
// (12, 12.0 and 1.2e1 alike); ok=false for a missing or null field.
func optionalInteger(obj *members, field string) (int64, bool, error) {
	raw := obj.get(field)
	if !present(raw) {
		return 0, false, nil
	}
	if !isNumber(raw) {
		return 0, false, &DecodeError{Field: field, Reason: ReasonNotNumber}
	}
	if n, ok := smallInt(raw); ok {
		return n, true, nil
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return n, true, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	// -2^63 <= f < 2^63: both bounds are exact float64 values.
	if err != nil || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false, &DecodeError{Field: field, Reason: ReasonNotInteger}
	}
	return int64(f), true, nil
}

// isNumber reports whether raw, a valid JSON value, is a number.
func isNumber(raw json.RawMessage) bool {
	c := raw[0]
	return c == '-' || (c >= '0' && c <= '9')
}

// requiredTime parses an RFC 3339 timestamp that carries an offset ("Z" or
// "+02:00") and returns it in UTC, truncated to a whole microsecond (towards
// the past): PostgreSQL's timestamptz holds microseconds, and pgx truncates
// the same way when it writes one, so a tie in memory is a tie in the
// database (docs/design.md "Decoding rules").
func requiredTime(obj *members, field string) (time.Time, error) {
	raw, plain := obj.getString(field)
	if !present(raw) {
		return time.Time{}, &DecodeError{Field: field, Reason: ReasonMissing}
	}
	return timeValue(raw, plain, field)
}

// optionalTime is requiredTime for an optional field: the zero time when it
// is missing or null.
func optionalTime(obj *members, field string) (time.Time, error) {
	raw, plain := obj.getString(field)
	if !present(raw) {
		return time.Time{}, nil
	}
	return timeValue(raw, plain, field)
}

// timeValue parses the present raw JSON value of field as requiredTime says.
func timeValue(raw json.RawMessage, plain bool, field string) (time.Time, error) {
	if raw[0] != '"' {
		return time.Time{}, &DecodeError{Field: field, Reason: ReasonNotRFC3339}
	}
	s, ok := string(raw[1:len(raw)-1]), true
	if !plain {
		s, ok = unquote(raw)
	}
	if !ok {
		return time.Time{}, &DecodeError{Field: field, Reason: ReasonNotRFC3339}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !rfc3339Offset(s) {
		return time.Time{}, &DecodeError{Field: field, Reason: ReasonNotRFC3339}
	}
	return t.UTC().Truncate(time.Microsecond), nil
}

// rfc3339Offset reports whether s, which time.Parse read as RFC 3339, ends
// in an offset RFC 3339 has: Z, or time-numoffset with hours 00-23 and
// minutes 00-59. Go's parser also takes +24:00 and minute 60 (an event of
// +24:00 counted a day early; PostgreSQL refuses both).
func rfc3339Offset(s string) bool {
	if strings.HasSuffix(s, "Z") {
		return true
	}
	if len(s) < 6 {
		return false
	}
	off := s[len(s)-6:] // time.Parse held: "+HH:MM" or "-HH:MM"
	return off[1] <= '2' && (off[1] < '2' || off[2] <= '3') && off[4] <= '5'
}

// unquote returns the string value of the raw JSON string raw.
func unquote(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), true // valid JSON: no escapes, no control characters
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// syntaxError names the member whose value broke the JSON syntax when it can
// find one, so that `"delay_s":NaN` reads "delay_s: not a finite number (NaN
// and Infinity are not JSON)" rather than a bare syntax error (RFC 8259 has
// no NaN or Infinity).
func syntaxError(value []byte, syn *json.SyntaxError) *DecodeError {
	generic := &DecodeError{Reason: "invalid JSON: " + syn.Error()}
	off := int(syn.Offset) - 1 // the offending byte
	if off < 0 || off >= len(value) {
		return generic
	}
	start := off
	for start > 0 && strings.IndexByte("+-.0123456789eEaAnNiIfFtyY", value[start-1]) >= 0 {
		start-- // back to the start of the bad literal
	}
	colon := start - 1
	for colon >= 0 && (value[colon] == ' ' || value[colon] == '\t' || value[colon] == '\n' || value[colon] == '\r') {
		colon--
	}
	if colon < 2 || value[colon] != ':' {
		return generic
	}
	keyEnd := colon - 1
	for keyEnd >= 0 && (value[keyEnd] == ' ' || value[keyEnd] == '\t' || value[keyEnd] == '\n' || value[keyEnd] == '\r') {
		keyEnd--
	}
	if keyEnd < 1 || value[keyEnd] != '"' {
		return generic
	}
	keyStart := bytes.LastIndexByte(value[:keyEnd], '"')
	if keyStart < 0 {
		return generic
	}
	field := string(value[keyStart+1 : keyEnd])
	lit := strings.TrimLeft(string(value[start:min(len(value), start+9)]), "+-")
	if strings.HasPrefix(lit, "NaN") || strings.HasPrefix(lit, "Inf") {
		return &DecodeError{Field: field, Reason: ReasonNotFinite + " (NaN and Infinity are not JSON)"}
	}
	return &DecodeError{Field: field, Reason: "invalid JSON value: " + syn.Error()}
}
