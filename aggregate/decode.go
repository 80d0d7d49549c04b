package aggregate

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxAbsDelayS is the largest accepted |delay_s|, in seconds (one day), from
// docs/design.md "Decoding rules".
const MaxAbsDelayS = 86400

// Reasons of a DecodeError. The text of a DecodeError is "FIELD: REASON", or
// REASON alone for whole-payload reasons (ReasonInvalidUTF8, ReasonNotObject,
// "invalid JSON: ..."). They are stored in dead_letters, so they are part of
// the contract: change them only on purpose.
const (
	ReasonInvalidUTF8     = "invalid UTF-8"
	ReasonNotObject       = "not a JSON object"
	ReasonMissing         = "missing"
	ReasonNonEmptyString  = "must be a non-empty string"
	ReasonString          = "must be a string"
	ReasonNUL             = "contains NUL"
	ReasonNotNumber       = "not a number"
	ReasonNotFinite       = "not a finite number"
	ReasonNotInteger      = "not an integer"
	ReasonNotRFC3339      = "not RFC 3339 with offset"
	ReasonDelayOutOfRange = "out of range: |delay_s| > 86400"
	ReasonLatOutOfRange   = "out of range: |lat| > 90"
	ReasonLonOutOfRange   = "out of range: |lon| > 180"
	ReasonBearingRange    = "out of range: not in 0..360"
	ReasonSpeedRange      = "out of range: < 0"
	ReasonNameTooLong     = "too long: more than 256 bytes"
	ReasonIDTooLong       = "too long: more than 256 bytes" // MaxIDBytes
	ReasonNotDate         = "not a date YYYYMMDD"
)

// MaxNameBytes bounds line_name, line_short_name and stop_name, in bytes of
// UTF-8 (docs/design.md "Decoding rules" bounds ids the same way): a name is
// something a person reads next to an id, and a producer's mistake must not
// fill the names table with megabytes.
const MaxNameBytes = 256

// MaxIDBytes bounds the ids (trip_id, line, stop_id, operator, vehicle_id),
// in bytes of UTF-8 (docs/design.md "Decoding rules"): they are keys of
// PostgreSQL's indexes, which cannot hold unbounded ones, and real ids are
// short. A longer one makes the record a dead letter decode.
const MaxIDBytes = 256

// DecodePrediction decodes one message value of topic arrival_predictions.
//
// The value must be a JSON object (docs/design.md "Data contract"):
//
//	{"trip_id": "t1", "line": "L1", "stop_id": "S1", "operator": "OP",
//	 "delay_s": -30, "event_time": "2026-05-04T10:00:00+02:00",
//	 "vehicle_id": "V7", "stop_sequence": 12,
//	 "start_date": "20260504", "arrival_time": "2026-05-04T10:07:30+02:00",
//	 "line_name": "Spring Garden", "line_short_name": "1", "stop_name": "Mumford Terminal"}
//
// trip_id, line, stop_id and operator are required non-empty strings of at
// most MaxIDBytes bytes, as are vehicle_id when present; delay_s
// is a required finite JSON number of seconds with |delay_s| <= 86400 (a
// string such as "12" or "NaN" is rejected); event_time is a required RFC 3339
// timestamp with an offset (time.RFC3339Nano; offsets -23:59..+23:59, not
// Go's +24:00), returned in UTC and truncated
// to whole microseconds, PostgreSQL's precision; vehicle_id (string) and
// stop_sequence (integral number) are optional, null meaning absent;
// start_date (a JSON string of 8 digits naming a calendar date, YYYYMMDD:
// GTFS-realtime TripDescriptor.start_date, the trip's service day) and
// arrival_time (the predicted arrival, RFC 3339 with an offset like
// event_time) are optional, null meaning absent, anything else that is not
// such a value (also "") an error; line_name, line_short_name and stop_name are optional strings of at most
// MaxNameBytes bytes (null or "" meaning absent), valid UTF-8 like the whole
// value. Unknown fields, and fields whose name differs only in case, are
// ignored. No string may contain NUL, since PostgreSQL text cannot store it.
//
// Fields are checked in the order of the table above and the first fault is
// returned as a *DecodeError, e.g. "delay_s: not a finite number". It never
// panics, whatever the input.
func DecodePrediction(value []byte) (Prediction, error) {
	var p Prediction
	var n RawNames
	if err := decodePrediction(value, &p, &n); err != nil {
		return Prediction{}, err
	}
	p.LineName, p.LineShortName, p.StopName = string(n.Line), string(n.LineShort), string(n.Stop)
	return p, nil
}

// RawNames are the optional names of one prediction as DecodePredictionNames
// returns them: the bytes of line_name, line_short_name and stop_name (JSON
// escapes decoded; valid UTF-8, no NUL, at most MaxNameBytes), nil when
// absent or "". They alias the decoded message value unless the JSON string
// held escapes: copy what you keep.
type RawNames struct {
	Line, LineShort, Stop []byte
}

// DecodePredictionNames is DecodePrediction that returns the names as bytes
// instead of strings in the Prediction (whose name fields stay ""), so that a
// caller keeping names per id (Names) compares bytes and makes a string only
// of a name that changed: names cost no allocation per event. Same rules and
// errors as DecodePrediction.
func DecodePredictionNames(value []byte) (Prediction, RawNames, error) {
	var p Prediction
	var n RawNames
	if err := decodePrediction(value, &p, &n); err != nil {
		return Prediction{}, RawNames{}, err
	}
	return p, n, nil
}

// decodePrediction decodes value into *p and *n (the callers' zero values,
// on their stacks: no copy of a Prediction per layer); after an error they
// hold what was decoded before it.
func decodePrediction(value []byte, p *Prediction, n *RawNames) (err error) {
	var m members
	if err := decodeObjectInto(value, predictionFields, &m); err != nil {
		return err
	}
	obj := &m
	if p.TripID, err = requiredString(obj, "trip_id"); err != nil {
		return err
	}
	if p.Line, err = requiredString(obj, "line"); err != nil {
		return err
	}
	if p.StopID, err = requiredString(obj, "stop_id"); err != nil {
		return err
	}
	if p.Operator, err = requiredString(obj, "operator"); err != nil {
		return err
	}
	d, ok, err := optionalNumber(obj, "delay_s")
	if err != nil {
		return err
	}
	if !ok {
		return &DecodeError{Field: "delay_s", Reason: ReasonMissing}
	}
	if math.Abs(d) > MaxAbsDelayS {
		return &DecodeError{Field: "delay_s", Reason: ReasonDelayOutOfRange}
	}
	p.DelayS = d
	if p.EventTime, err = requiredTime(obj, "event_time"); err != nil {
		return err
	}
	if p.VehicleID, err = optionalString(obj, "vehicle_id"); err != nil {
		return err
	}
	if p.StopSequence, p.HasStopSequence, err = optionalInteger(obj, "stop_sequence"); err != nil {
		return err
	}
	if p.StartDate, err = optionalDate(obj, "start_date"); err != nil {
		return err
	}
	if p.ArrivalTime, err = optionalTime(obj, "arrival_time"); err != nil {
		return err
	}
	if obj.raw[predLineName] == nil && obj.raw[predLineShortName] == nil && obj.raw[predStopName] == nil {
		return nil // no names: the common case of feeds without a static feed
	}
	if n.Line, err = optionalName(obj, predLineName); err != nil {
		return err
	}
	if n.LineShort, err = optionalName(obj, predLineShortName); err != nil {
		return err
	}
	if n.Stop, err = optionalName(obj, predStopName); err != nil {
		return err
	}
	return nil
}

// DecodePosition decodes one message value of topic vehicle_positions.
//
// The value must be a JSON object (docs/design.md "Data contract"):
//
//	{"vehicle_id": "V7", "lat": 52.37, "lon": 4.89,
//	 "event_time": "2026-05-04T10:00:00Z", "trip_id": "t1", "line": "L1",
//	 "operator": "OP", "bearing": 90, "speed_mps": 12.5}
//
// vehicle_id is a required non-empty string; lat (degrees, -90..90), lon
// (degrees, -180..180) are required finite JSON numbers; event_time is a
// required RFC 3339 timestamp with an offset, returned in UTC and truncated to
// whole microseconds; trip_id, line, operator (strings), bearing (degrees,
// 0..360) and speed_mps (metres per second, >= 0) are optional, null or
// missing meaning absent, a wrong type being an error. Other rules and errors
// are those of DecodePrediction.
func DecodePosition(value []byte) (Position, error) {
	var m members
	if err := decodeObjectInto(value, positionFields, &m); err != nil {
		return Position{}, err
	}
	obj := &m
	var err error
	var p Position
	if p.VehicleID, err = requiredString(obj, "vehicle_id"); err != nil {
		return Position{}, err
	}
	if p.Lat, err = requiredNumber(obj, "lat"); err != nil {
		return Position{}, err
	}
	if math.Abs(p.Lat) > 90 {
		return Position{}, &DecodeError{Field: "lat", Reason: ReasonLatOutOfRange}
	}
	if p.Lon, err = requiredNumber(obj, "lon"); err != nil {
		return Position{}, err
	}
	if math.Abs(p.Lon) > 180 {
		return Position{}, &DecodeError{Field: "lon", Reason: ReasonLonOutOfRange}
	}
	if p.EventTime, err = requiredTime(obj, "event_time"); err != nil {
		return Position{}, err
	}
	if p.TripID, err = optionalString(obj, "trip_id"); err != nil {
		return Position{}, err
	}
	if p.Line, err = optionalString(obj, "line"); err != nil {
		return Position{}, err
	}
	if p.Operator, err = optionalString(obj, "operator"); err != nil {
		return Position{}, err
	}
	b, ok, err := optionalNumber(obj, "bearing")
	if err != nil {
		return Position{}, err
	}
	if ok {
		if b < 0 || b > 360 {
			return Position{}, &DecodeError{Field: "bearing", Reason: ReasonBearingRange}
		}
		p.Bearing = &b
	}
	s, ok, err := optionalNumber(obj, "speed_mps")
	if err != nil {
		return Position{}, err
	}
	if ok {
		if s < 0 {
			return Position{}, &DecodeError{Field: "speed_mps", Reason: ReasonSpeedRange}
		}
		p.SpeedMPS = &s
	}
	return p, nil
}

// predictionFields and positionFields are the members of the contract that
// the decoders read; every other member is ignored.
var (
	predictionFields = []string{"trip_id", "line", "stop_id", "operator", "delay_s", "event_time",
		"vehicle_id", "stop_sequence", "start_date", "arrival_time", "line_name", "line_short_name", "stop_name"}
	positionFields = []string{"vehicle_id", "lat", "lon", "event_time", "trip_id", "line", "operator",
		"bearing", "speed_mps"}
)

// The positions of the names in predictionFields: optionalName reads them
// by index, so a record without names costs no look-up of them.
const (
	predLineName      = 10
	predLineShortName = 11
	predStopName      = 12
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

// optionalDate returns the date of the optional string field as the number
// YYYYMMDD (20160519), 0 when it is missing or null. A present value must be
// a JSON string of exactly 8 ASCII digits naming a day of the Gregorian
// calendar (ParseServiceDate); anything else is ReasonNotDate.
func optionalDate(obj *members, field string) (int32, error) {
	raw, plain := obj.getString(field)
	if !present(raw) {
		return 0, nil
	}
	var d int32
	ok := false
	if plain {
		d, ok = ParseServiceDate([]byte(raw[1 : len(raw)-1]))
	} else if s, isString := unquote(raw); isString {
		d, ok = ParseServiceDate(s) // escapes such as \u0032 for "2"
	}
	if !ok {
		return 0, &DecodeError{Field: field, Reason: ReasonNotDate}
	}
	return d, nil
}

// ParseServiceDate parses a GTFS date, YYYYMMDD (GTFS reference, "Field
// Types": Date; GTFS-realtime TripDescriptor.start_date), into the number
// YYYYMMDD. ok is false unless s is exactly 8 ASCII digits naming a day of
// the Gregorian calendar from 0001-01-01 (20160230 is not one).
func ParseServiceDate[T string | []byte](s T) (d int32, ok bool) {
	if len(s) != 8 {
		return 0, false
	}
	for i := range 8 {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d = d*10 + int32(c-'0')
	}
	y, m, day := int(d/10000), time.Month(d/100%100), int(d%100)
	if y < 1 || m < 1 || m > 12 || day < 1 || day > 31 {
		return 0, false
	}
	if t := time.Date(y, m, day, 0, 0, 0, 0, time.UTC); t.Month() != m || t.Day() != day {
		return 0, false
	}
	return d, true
}

// ServiceDateString returns the service date d (YYYYMMDD as a number, as
// ParseServiceDate returns it) as its 8 digits, "20160519".
func ServiceDateString(d int32) string {
	b := [8]byte{}
	for i := 7; i >= 0; i-- {
		b[i] = byte('0' + d%10)
		d /= 10
	}
	return string(b[:])
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
