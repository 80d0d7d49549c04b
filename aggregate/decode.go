package aggregate

import (
	"math"
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
