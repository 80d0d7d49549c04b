package aggregate

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxAbsDelayS is the largest accepted |delay_s|, in seconds (one day), from
// the data contract in DESIGN.md.
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
)

// DecodePrediction decodes one message value of topic arrival_predictions.
//
// The value must be a JSON object (DESIGN.md "Data contract"):
//
//	{"trip_id": "t1", "line": "L1", "stop_id": "S1", "operator": "OP",
//	 "delay_s": -30, "event_time": "2026-05-04T10:00:00+02:00",
//	 "vehicle_id": "V7", "stop_sequence": 12}
//
// trip_id, line, stop_id and operator are required non-empty strings; delay_s
// is a required finite JSON number of seconds with |delay_s| <= 86400 (a
// string such as "12" or "NaN" is rejected); event_time is a required RFC 3339
// timestamp with an offset (time.RFC3339Nano), returned in UTC; vehicle_id
// (string) and stop_sequence (integral number) are optional, null meaning
// absent. Unknown fields, and fields whose name differs only in case, are
// ignored. No string may contain NUL, since PostgreSQL text cannot store it.
//
// Fields are checked in the order of the table above and the first fault is
// returned as a *DecodeError, e.g. "delay_s: not a finite number". It never
// panics, whatever the input.
func DecodePrediction(value []byte) (Prediction, error) {
	obj, err := decodeObject(value)
	if err != nil {
		return Prediction{}, err
	}
	var p Prediction
	if p.TripID, err = requiredString(obj, "trip_id"); err != nil {
		return Prediction{}, err
	}
	if p.Line, err = requiredString(obj, "line"); err != nil {
		return Prediction{}, err
	}
	if p.StopID, err = requiredString(obj, "stop_id"); err != nil {
		return Prediction{}, err
	}
	if p.Operator, err = requiredString(obj, "operator"); err != nil {
		return Prediction{}, err
	}
	d, ok, err := optionalNumber(obj, "delay_s")
	if err != nil {
		return Prediction{}, err
	}
	if !ok {
		return Prediction{}, &DecodeError{Field: "delay_s", Reason: ReasonMissing}
	}
	if math.Abs(d) > MaxAbsDelayS {
		return Prediction{}, &DecodeError{Field: "delay_s", Reason: ReasonDelayOutOfRange}
	}
	p.DelayS = d
	if p.EventTime, err = requiredTime(obj, "event_time"); err != nil {
		return Prediction{}, err
	}
	if p.VehicleID, err = optionalString(obj, "vehicle_id"); err != nil {
		return Prediction{}, err
	}
	if p.StopSequence, p.HasStopSequence, err = optionalInteger(obj, "stop_sequence"); err != nil {
		return Prediction{}, err
	}
	return p, nil
}

// DecodePosition decodes one message value of topic vehicle_positions.
//
// The value must be a JSON object (DESIGN.md "Data contract"):
//
//	{"vehicle_id": "V7", "lat": 52.37, "lon": 4.89,
//	 "event_time": "2026-05-04T10:00:00Z", "trip_id": "t1", "line": "L1",
//	 "operator": "OP", "bearing": 90, "speed_mps": 12.5}
//
// vehicle_id is a required non-empty string; lat (degrees, -90..90), lon
// (degrees, -180..180) are required finite JSON numbers; event_time is a
// required RFC 3339 timestamp with an offset, returned in UTC; trip_id, line,
// operator (strings), bearing (degrees, 0..360) and speed_mps (metres per
// second, >= 0) are optional, null or missing meaning absent, a wrong type
// being an error. Other rules and errors are those of DecodePrediction.
func DecodePosition(value []byte) (Position, error) {
	obj, err := decodeObject(value)
	if err != nil {
		return Position{}, err
	}
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

// decodeObject checks that value is valid UTF-8 holding one JSON object and
// returns its members. Member names match exactly (encoding/json's struct
// decoding would also match "Trip_ID").
func decodeObject(value []byte) (map[string]json.RawMessage, error) {
	if !utf8.Valid(value) {
		return nil, &DecodeError{Reason: ReasonInvalidUTF8}
	}
	first := firstNonSpace(value)
	if first == 0 {
		return nil, &DecodeError{Reason: ReasonNotObject}
	}
	var obj map[string]json.RawMessage
	err := json.Unmarshal(value, &obj)
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return nil, &DecodeError{Reason: "invalid JSON: " + syn.Error()}
	case first != '{' || err != nil || obj == nil:
		return nil, &DecodeError{Reason: ReasonNotObject}
	}
	return obj, nil
}

// firstNonSpace returns the first byte of b that is not JSON whitespace, or 0.
func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}

// present reports whether raw holds a value other than JSON null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

func requiredString(obj map[string]json.RawMessage, field string) (string, error) {
	raw := obj[field]
	if !present(raw) {
		return "", &DecodeError{Field: field, Reason: ReasonMissing}
	}
	s, err := stringValue(raw, field, ReasonNonEmptyString)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", &DecodeError{Field: field, Reason: ReasonNonEmptyString}
	}
	return s, nil
}

// optionalString returns "" for a missing or null field.
func optionalString(obj map[string]json.RawMessage, field string) (string, error) {
	raw := obj[field]
	if !present(raw) {
		return "", nil
	}
	return stringValue(raw, field, ReasonString)
}

func stringValue(raw json.RawMessage, field, wrongType string) (string, error) {
	if raw[0] != '"' {
		return "", &DecodeError{Field: field, Reason: wrongType}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", &DecodeError{Field: field, Reason: wrongType}
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", &DecodeError{Field: field, Reason: ReasonNUL}
	}
	return s, nil
}

func requiredNumber(obj map[string]json.RawMessage, field string) (float64, error) {
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
func optionalNumber(obj map[string]json.RawMessage, field string) (float64, bool, error) {
	raw := obj[field]
	if !present(raw) {
		return 0, false, nil
	}
	if !isNumber(raw) {
		return 0, false, &DecodeError{Field: field, Reason: ReasonNotNumber}
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
func optionalInteger(obj map[string]json.RawMessage, field string) (int64, bool, error) {
	raw := obj[field]
	if !present(raw) {
		return 0, false, nil
	}
	if !isNumber(raw) {
		return 0, false, &DecodeError{Field: field, Reason: ReasonNotNumber}
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
// "+02:00") and returns it in UTC.
func requiredTime(obj map[string]json.RawMessage, field string) (time.Time, error) {
	raw := obj[field]
	if !present(raw) {
		return time.Time{}, &DecodeError{Field: field, Reason: ReasonMissing}
	}
	if raw[0] != '"' {
		return time.Time{}, &DecodeError{Field: field, Reason: ReasonNotRFC3339}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, &DecodeError{Field: field, Reason: ReasonNotRFC3339}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, &DecodeError{Field: field, Reason: ReasonNotRFC3339}
	}
	return t.UTC(), nil
}
