package aggregate

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

const validPrediction = `{"trip_id":"t1","line":"L1","stop_id":"S1","operator":"OP","delay_s":-30,` +
	`"event_time":"2026-05-04T10:00:00+02:00"}`

const validPosition = `{"vehicle_id":"V7","lat":52.37,"lon":4.89,"event_time":"2026-05-04T10:00:00Z"}`

// withField returns the valid JSON object base with field set to raw JSON
// (or removed when raw is "").
func withField(base, field, raw string) string {
	// Rebuild from scratch to keep it simple: drop the field, append the new one.
	obj := strings.TrimSuffix(strings.TrimPrefix(base, "{"), "}")
	var parts []string
	for _, p := range splitTop(obj) {
		if strings.HasPrefix(p, `"`+field+`":`) {
			continue
		}
		parts = append(parts, p)
	}
	if raw != "" {
		parts = append(parts, `"`+field+`":`+raw)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// splitTop splits the members of a flat JSON object body (no nested commas).
func splitTop(body string) []string {
	var out []string
	depth, inStr, start := 0, false, 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			out = append(out, body[start:i])
			start = i + 1
		}
	}
	return append(out, body[start:])
}

func TestDecodePredictionValid(t *testing.T) {
	p, err := DecodePrediction([]byte(validPrediction))
	if err != nil {
		t.Fatal(err)
	}
	want := Prediction{TripID: "t1", Line: "L1", StopID: "S1", Operator: "OP", DelayS: -30,
		EventTime: time.Date(2026, 5, 4, 8, 0, 0, 0, time.UTC)}
	if p != want {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	if p.EventTime.Location() != time.UTC {
		t.Fatalf("location %v, want UTC", p.EventTime.Location())
	}

	full := withField(withField(withField(validPrediction, "vehicle_id", `"V7"`), "stop_sequence", `12`),
		"extra", `{"nested":[1,2,"x"]}`)
	p, err = DecodePrediction([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if p.VehicleID != "V7" || !p.HasStopSequence || p.StopSequence != 12 {
		t.Fatalf("optional fields: %+v", p)
	}

	for _, raw := range []string{`12.0`, `1.2e1`, `120e-1`} {
		p, err := DecodePrediction([]byte(withField(validPrediction, "stop_sequence", raw)))
		if err != nil || p.StopSequence != 12 {
			t.Errorf("stop_sequence %s: %v, %d", raw, err, p.StopSequence)
		}
	}
	for _, raw := range []string{`null`, ``} {
		p, err := DecodePrediction([]byte(withField(withField(validPrediction, "stop_sequence", raw), "vehicle_id", raw)))
		if err != nil || p.HasStopSequence || p.VehicleID != "" {
			t.Errorf("absent optional %q: %v, %+v", raw, err, p)
		}
	}
	// Boundaries of delay_s are inclusive; fractions are kept.
	for _, raw := range []string{`86400`, `-86400`, `0.5`, `-0`, `1e-400`} {
		if _, err := DecodePrediction([]byte(withField(validPrediction, "delay_s", raw))); err != nil {
			t.Errorf("delay_s %s: %v", raw, err)
		}
	}
	// Field names match exactly: a differently cased field is unknown, ignored.
	p, err = DecodePrediction([]byte(withField(validPrediction, "Delay_S", `"x"`)))
	if err != nil || p.DelayS != -30 {
		t.Errorf("case-variant field: %v %+v", err, p)
	}
	// Escapes are decoded.
	p, err = DecodePrediction([]byte(withField(validPrediction, "line", `"L\u00e9\n"`)))
	if err != nil || p.Line != "Lé\n" {
		t.Errorf("escaped line: %v %q", err, p.Line)
	}
	// Surrounding whitespace is fine.
	if _, err := DecodePrediction([]byte(" \n" + validPrediction + "\t ")); err != nil {
		t.Errorf("whitespace: %v", err)
	}
}

// Names (line_name, line_short_name, stop_name) are optional strings of at
// most MaxNameBytes bytes; DecodePredictionNames returns the same bytes that
// DecodePrediction returns as strings, aliasing the value when unescaped.
func TestDecodePredictionNames(t *testing.T) {
	p, err := DecodePrediction([]byte(validPrediction))
	if err != nil || p.LineName != "" || p.LineShortName != "" || p.StopName != "" {
		t.Fatalf("no names: %v %+v", err, p)
	}
	v := withField(withField(withField(validPrediction, "line_name", `"Airport - Fall River \"Express\""`),
		"line_short_name", `"320"`), "stop_name", `"Bridge Terminal Bay 10 (7610)"`)
	p, err = DecodePrediction([]byte(v))
	if err != nil || p.LineName != `Airport - Fall River "Express"` || p.LineShortName != "320" || p.StopName != "Bridge Terminal Bay 10 (7610)" {
		t.Fatalf("names: %v %+v", err, p)
	}
	q, raw, err := DecodePredictionNames([]byte(v))
	if err != nil || q.LineName != "" || string(raw.Line) != p.LineName || string(raw.LineShort) != "320" || string(raw.Stop) != p.StopName {
		t.Fatalf("raw names: %v %+v %q", err, q, raw)
	}
	q.LineName, q.LineShortName, q.StopName = p.LineName, p.LineShortName, p.StopName
	if q != p {
		t.Fatalf("DecodePredictionNames %+v, DecodePrediction %+v", q, p)
	}
	buf := []byte(v)
	_, raw, _ = DecodePredictionNames(buf)
	if i := bytes.Index(buf, []byte(`"320"`)) + 1; &raw.LineShort[0] != &buf[i] {
		t.Error("an unescaped name is not an alias of the value")
	}
	for _, absent := range []string{``, `null`, `""`} {
		p, raw, err := DecodePredictionNames([]byte(withField(withField(validPrediction, "line_name", absent), "stop_name", absent)))
		if err != nil || raw.Line != nil || raw.Stop != nil || p.LineName != "" {
			t.Errorf("absent name %q: %v %q", absent, err, raw)
		}
	}
	// The bound is inclusive; UTF-8 and escapes are fine.
	for _, in := range []string{strings.Repeat("x", MaxNameBytes), "Gare de l'Est à Paris – 東京", `Caf\u00e9 \ud83d\ude8c`} {
		p, err := DecodePrediction([]byte(withField(validPrediction, "stop_name", `"`+in+`"`)))
		var want string
		_ = json.Unmarshal([]byte(`"`+in+`"`), &want)
		if err != nil || p.StopName != want {
			t.Errorf("stop_name %q: %v %q, want %q", in, err, p.StopName, want)
		}
	}
	if predictionFields[predLineName] != "line_name" || predictionFields[predLineShortName] != "line_short_name" ||
		predictionFields[predStopName] != "stop_name" {
		t.Errorf("the name indexes do not point at the names: %q", predictionFields)
	}
	if ReasonNameTooLong != "too long: more than "+strconv.Itoa(MaxNameBytes)+" bytes" {
		t.Errorf("ReasonNameTooLong %q does not say MaxNameBytes %d", ReasonNameTooLong, MaxNameBytes)
	}
}

// Ids of exactly 256 bytes are taken (docs/design.md "Decoding rules": longer
// ones are dead letters), in both topics.
func TestDecodeIDsOf256Bytes(t *testing.T) {
	id := strings.Repeat("€", 85) + "x" // 256 bytes
	p := validPrediction
	for _, f := range []string{"trip_id", "line", "stop_id", "operator", "vehicle_id"} {
		p = withField(p, f, `"`+id+`"`)
	}
	got, err := DecodePrediction([]byte(p))
	if err != nil || got.TripID != id || got.Line != id || got.StopID != id || got.Operator != id || got.VehicleID != id {
		t.Errorf("prediction with 256-byte ids: %+v, %v", got, err)
	}
	q := validPosition
	for _, f := range []string{"vehicle_id", "trip_id", "line", "operator"} {
		q = withField(q, f, `"`+id+`"`)
	}
	pos, err := DecodePosition([]byte(q))
	if err != nil || pos.VehicleID != id || pos.TripID != id || pos.Line != id || pos.Operator != id {
		t.Errorf("position with 256-byte ids: %+v, %v", pos, err)
	}
}

func TestDecodeEventTimeUTC(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2026-05-04T10:00:00Z", time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)},
		{"2026-05-04T10:00:00+02:00", time.Date(2026, 5, 4, 8, 0, 0, 0, time.UTC)},
		{"2026-05-04T10:00:00.123456-01:30", time.Date(2026, 5, 4, 11, 30, 0, 123456000, time.UTC)},
		{"1969-12-31T23:59:59.5Z", time.Date(1969, 12, 31, 23, 59, 59, 5e8, time.UTC)},
		{"2026-05-04T10:00:00+23:59", time.Date(2026, 5, 3, 10, 1, 0, 0, time.UTC)},
		{"2026-05-04T10:00:00-23:59", time.Date(2026, 5, 5, 9, 59, 0, 0, time.UTC)},
		{"2026-05-04T10:00:00-00:00", time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)},
	} {
		p, err := DecodePrediction([]byte(withField(validPrediction, "event_time", `"`+tc.in+`"`)))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !p.EventTime.Equal(tc.want) || p.EventTime.Location() != time.UTC {
			t.Errorf("%s: got %v, want %v", tc.in, p.EventTime, tc.want)
		}
	}
}

// Event times are truncated to whole microseconds, PostgreSQL's precision
// (docs/design.md "Decoding rules"), towards the past, as pgx does when it writes
// a timestamptz; so two events of one key that differ below a microsecond
// tie in memory as they do in the database.
func TestDecodeEventTimeMicroseconds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2024-01-01T00:00:00.1234567Z", time.Date(2024, 1, 1, 0, 0, 0, 123456000, time.UTC)},
		{"2024-01-01T00:00:00.123456999Z", time.Date(2024, 1, 1, 0, 0, 0, 123456000, time.UTC)},
		{"2024-01-01T00:00:00.000000999+02:00", time.Date(2023, 12, 31, 22, 0, 0, 0, time.UTC)},
		{"2026-05-04T10:00:00.123456789-01:30", time.Date(2026, 5, 4, 11, 30, 0, 123456000, time.UTC)},
		{"2026-05-04T10:00:00.9999999-05:00", time.Date(2026, 5, 4, 15, 0, 0, 999999000, time.UTC)},
		{"1969-12-31T23:59:59.9999995Z", time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)},
	} {
		p, err := DecodePrediction([]byte(withField(validPrediction, "event_time", `"`+tc.in+`"`)))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		v, err := DecodePosition([]byte(withField(validPosition, "event_time", `"`+tc.in+`"`)))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if p.EventTime != tc.want || v.EventTime != tc.want {
			t.Errorf("%s: prediction %s, position %s; want %s", tc.in,
				p.EventTime.Format(time.RFC3339Nano), v.EventTime.Format(time.RFC3339Nano), tc.want.Format(time.RFC3339Nano))
		}
	}
	// 500 ns apart, in one microsecond: equal, so the later offset wins the tie.
	a, errA := DecodePrediction([]byte(withField(validPrediction, "event_time", `"2024-01-01T00:00:00.1234561Z"`)))
	b, errB := DecodePrediction([]byte(withField(validPrediction, "event_time", `"2024-01-01T00:00:00.1234566Z"`)))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !a.EventTime.Equal(b.EventTime) {
		t.Errorf("event times 500 ns apart in one microsecond: %s and %s, want equal",
			a.EventTime.Format(time.RFC3339Nano), b.EventTime.Format(time.RFC3339Nano))
	}
}

func TestDecodePredictionErrors(t *testing.T) {
	set := func(field, raw string) string { return withField(validPrediction, field, raw) }
	tests := []struct {
		name, in, want string
	}{
		{"empty", ``, "not a JSON object"},
		{"whitespace", " \n\t", "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"array", `[1,2]`, "not a JSON object"},
		{"array of object", `[` + validPrediction + `]`, "not a JSON object"},
		{"string", `"x"`, "not a JSON object"},
		{"number", `12`, "not a JSON object"},
		{"true", `true`, "not a JSON object"},
		{"truncated", `{"trip_id":"t1"`, "invalid JSON: unexpected end of JSON input"},
		{"garbage", `{trip_id}`, "invalid JSON: invalid character 't' looking for beginning of object key string"},
		{"trailing", validPrediction + `x`, "invalid JSON: invalid character 'x' after top-level value"},
		{"two objects", validPrediction + validPrediction, "invalid JSON: invalid character '{' after top-level value"},
		{"NaN literal", set("delay_s", `NaN`), "delay_s: not a finite number (NaN and Infinity are not JSON)"},
		{"Infinity literal", set("delay_s", `Infinity`), "delay_s: not a finite number (NaN and Infinity are not JSON)"},
		{"-Infinity literal", set("delay_s", `-Infinity`), "delay_s: not a finite number (NaN and Infinity are not JSON)"},
		{"bad literal", set("delay_s", `12x`), "delay_s: invalid JSON value: invalid character 'x' after object key:value pair"},
		{"invalid UTF-8", strings.Replace(validPrediction, "t1", "t\xff", 1), "invalid UTF-8"},
		{"invalid UTF-8 outside strings", validPrediction + "\xc3", "invalid UTF-8"},

		{"trip_id missing", set("trip_id", ``), "trip_id: missing"},
		{"trip_id null", set("trip_id", `null`), "trip_id: missing"},
		{"trip_id empty", set("trip_id", `""`), "trip_id: must be a non-empty string"},
		{"trip_id number", set("trip_id", `12`), "trip_id: must be a non-empty string"},
		{"trip_id object", set("trip_id", `{}`), "trip_id: must be a non-empty string"},
		{"trip_id NUL", set("trip_id", `"a\u0000b"`), "trip_id: contains NUL"},
		{"line missing", set("line", ``), "line: missing"},
		{"line empty", set("line", `""`), "line: must be a non-empty string"},
		{"line NUL", set("line", `"\u0000"`), "line: contains NUL"},
		{"stop_id missing", set("stop_id", ``), "stop_id: missing"},
		{"stop_id array", set("stop_id", `["S1"]`), "stop_id: must be a non-empty string"},
		{"operator missing", set("operator", ``), "operator: missing"},
		{"operator false", set("operator", `false`), "operator: must be a non-empty string"},

		{"delay_s missing", set("delay_s", ``), "delay_s: missing"},
		{"delay_s null", set("delay_s", `null`), "delay_s: missing"},
		{"delay_s string", set("delay_s", `"12"`), "delay_s: not a number"},
		{"delay_s string NaN", set("delay_s", `"NaN"`), "delay_s: not a number"},
		{"delay_s string Infinity", set("delay_s", `"Infinity"`), "delay_s: not a number"},
		{"delay_s bool", set("delay_s", `true`), "delay_s: not a number"},
		{"delay_s object", set("delay_s", `{}`), "delay_s: not a number"},
		{"delay_s overflow", set("delay_s", `1e309`), "delay_s: not a finite number"},
		{"delay_s negative overflow", set("delay_s", `-1e309`), "delay_s: not a finite number"},
		{"delay_s too large", set("delay_s", `86400.001`), "delay_s: out of range: |delay_s| > 86400"},
		{"delay_s too small", set("delay_s", `-86401`), "delay_s: out of range: |delay_s| > 86400"},

		{"event_time missing", set("event_time", ``), "event_time: missing"},
		{"event_time null", set("event_time", `null`), "event_time: missing"},
		{"event_time no offset", set("event_time", `"2026-05-04T10:00:00"`), "event_time: not RFC 3339 with offset"},
		{"event_time date only", set("event_time", `"2026-05-04"`), "event_time: not RFC 3339 with offset"},
		{"event_time space", set("event_time", `"2026-05-04 10:00:00Z"`), "event_time: not RFC 3339 with offset"},
		{"event_time empty", set("event_time", `""`), "event_time: not RFC 3339 with offset"},
		{"event_time number", set("event_time", `1777888000`), "event_time: not RFC 3339 with offset"},
		{"event_time bad month", set("event_time", `"2026-13-04T10:00:00Z"`), "event_time: not RFC 3339 with offset"},
		{"event_time NUL", set("event_time", `"2026-05-04T10:00:00Z\u0000"`), "event_time: not RFC 3339 with offset"},
		// RFC 3339's time-numoffset has hours 00-23 and minutes 00-59; Go's
		// parser takes +24:00 (a day early) and minute 60.
		{"event_time offset +24:00", set("event_time", `"2026-05-04T10:00:00+24:00"`), "event_time: not RFC 3339 with offset"},
		{"event_time offset -24:00", set("event_time", `"2026-05-04T10:00:00-24:00"`), "event_time: not RFC 3339 with offset"},
		{"event_time offset +23:60", set("event_time", `"2026-05-04T10:00:00+23:60"`), "event_time: not RFC 3339 with offset"},
		{"event_time offset -05:60", set("event_time", `"2026-05-04T10:00:00.5-05:60"`), "event_time: not RFC 3339 with offset"},
		{"event_time offset escaped", set("event_time", `"2026-05-04T10:00:00+24\u003a00"`), "event_time: not RFC 3339 with offset"},

		// Ids are at most 256 bytes (docs/design.md "Decoding rules").
		{"trip_id too long", set("trip_id", `"`+strings.Repeat("t", MaxIDBytes+1)+`"`), "trip_id: too long: more than 256 bytes"},
		{"line too long", set("line", `"`+strings.Repeat("l", 1000)+`"`), "line: too long: more than 256 bytes"},
		{"stop_id too long in bytes", set("stop_id", `"`+strings.Repeat("€", 86)+`"`), "stop_id: too long: more than 256 bytes"},
		{"operator too long", set("operator", `"`+strings.Repeat("o", 100000)+`"`), "operator: too long: more than 256 bytes"},
		{"operator too long escaped", set("operator", `"`+strings.Repeat(`\u00e9`, 129)+`"`), "operator: too long: more than 256 bytes"},
		{"vehicle_id too long", set("vehicle_id", `"`+strings.Repeat("v", 257)+`"`), "vehicle_id: too long: more than 256 bytes"},

		{"vehicle_id number", set("vehicle_id", `7`), "vehicle_id: must be a string"},
		{"vehicle_id NUL", set("vehicle_id", `"V\u0000"`), "vehicle_id: contains NUL"},
		{"stop_sequence string", set("stop_sequence", `"3"`), "stop_sequence: not a number"},
		{"stop_sequence fraction", set("stop_sequence", `3.5`), "stop_sequence: not an integer"},
		{"stop_sequence too large", set("stop_sequence", `9223372036854775808`), "stop_sequence: not an integer"},
		{"stop_sequence overflow", set("stop_sequence", `1e400`), "stop_sequence: not an integer"},

		{"line_name number", set("line_name", `7`), "line_name: must be a string"},
		{"line_name object", set("line_name", `{"en":"x"}`), "line_name: must be a string"},
		{"line_short_name bool", set("line_short_name", `true`), "line_short_name: must be a string"},
		{"stop_name NUL", set("stop_name", `"Main\u0000St"`), "stop_name: contains NUL"},
		{"stop_name invalid UTF-8", set("stop_name", "\"Caf\xe9\""), "invalid UTF-8"},
		{"line_name too long", set("line_name", `"`+strings.Repeat("x", MaxNameBytes+1)+`"`), "line_name: too long: more than 256 bytes"},
		// 86 three-byte runes: 258 bytes, though 86 characters.
		{"stop_name too long in bytes", set("stop_name", `"`+strings.Repeat("€", 86)+`"`), "stop_name: too long: more than 256 bytes"},
		// Escapes count as the bytes they decode to: 129 x "\u00e9" are 258 bytes.
		{"stop_name too long escaped", set("stop_name", `"`+strings.Repeat(`\u00e9`, 129)+`"`), "stop_name: too long: more than 256 bytes"},

		// The first faulty field in contract order is reported.
		{"first fault wins", withField(set("trip_id", `""`), "delay_s", `"x"`), "trip_id: must be a non-empty string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePrediction([]byte(tc.in))
			checkDecodeError(t, err, tc.want)
		})
	}
}

func TestDecodePositionValid(t *testing.T) {
	p, err := DecodePosition([]byte(validPosition))
	if err != nil {
		t.Fatal(err)
	}
	if p.VehicleID != "V7" || p.Lat != 52.37 || p.Lon != 4.89 || p.Bearing != nil || p.SpeedMPS != nil ||
		!p.EventTime.Equal(time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)) || p.EventTime.Location() != time.UTC {
		t.Fatalf("got %+v", p)
	}
	in := `{"vehicle_id":"V7","lat":-90,"lon":180,"event_time":"2026-05-04T10:00:00+01:00",` +
		`"trip_id":"t1","line":"L1","operator":"OP","bearing":360,"speed_mps":0,"unknown":[null]}`
	p, err = DecodePosition([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if p.TripID != "t1" || p.Line != "L1" || p.Operator != "OP" || p.Bearing == nil || *p.Bearing != 360 ||
		p.SpeedMPS == nil || *p.SpeedMPS != 0 || p.Lat != -90 || p.Lon != 180 {
		t.Fatalf("got %+v", p)
	}
	p, err = DecodePosition([]byte(withField(withField(validPosition, "bearing", "null"), "speed_mps", "null")))
	if err != nil || p.Bearing != nil || p.SpeedMPS != nil {
		t.Fatalf("null optionals: %v %+v", err, p)
	}
}

func TestDecodePositionErrors(t *testing.T) {
	set := func(field, raw string) string { return withField(validPosition, field, raw) }
	tests := []struct {
		name, in, want string
	}{
		{"empty", ``, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"array", `[]`, "not a JSON object"},
		{"invalid JSON", `{"vehicle_id":}`, "vehicle_id: invalid JSON value: invalid character '}' looking for beginning of value"},
		{"not JSON", `not json`, "invalid JSON: invalid character 'o' in literal null (expecting 'u')"},
		{"invalid UTF-8", "{\"vehicle_id\":\"\xed\xa0\x80\"}", "invalid UTF-8"},
		{"vehicle_id missing", set("vehicle_id", ``), "vehicle_id: missing"},
		{"vehicle_id empty", set("vehicle_id", `""`), "vehicle_id: must be a non-empty string"},
		{"vehicle_id NUL", set("vehicle_id", `"\u0000"`), "vehicle_id: contains NUL"},
		{"lat missing", set("lat", ``), "lat: missing"},
		{"lat null", set("lat", `null`), "lat: missing"},
		{"lat string", set("lat", `"52"`), "lat: not a number"},
		{"lat overflow", set("lat", `1e999`), "lat: not a finite number"},
		{"lat range", set("lat", `90.0001`), "lat: out of range: |lat| > 90"},
		{"lat negative range", set("lat", `-91`), "lat: out of range: |lat| > 90"},
		{"lon missing", set("lon", ``), "lon: missing"},
		{"lon range", set("lon", `180.5`), "lon: out of range: |lon| > 180"},
		{"lon negative range", set("lon", `-181`), "lon: out of range: |lon| > 180"},
		{"event_time missing", set("event_time", ``), "event_time: missing"},
		{"event_time no offset", set("event_time", `"2026-05-04T10:00:00"`), "event_time: not RFC 3339 with offset"},
		{"trip_id number", set("trip_id", `1`), "trip_id: must be a string"},
		{"trip_id NUL", set("trip_id", `"\u0000"`), "trip_id: contains NUL"},
		{"line NUL", set("line", `"x\u0000"`), "line: contains NUL"},
		{"operator NUL", set("operator", `"\u0000x"`), "operator: contains NUL"},
		{"operator bool", set("operator", `true`), "operator: must be a string"},
		{"vehicle_id too long", set("vehicle_id", `"`+strings.Repeat("v", MaxIDBytes+1)+`"`), "vehicle_id: too long: more than 256 bytes"},
		{"trip_id too long", set("trip_id", `"`+strings.Repeat("t", 300)+`"`), "trip_id: too long: more than 256 bytes"},
		{"line too long", set("line", `"`+strings.Repeat("é", 129)+`"`), "line: too long: more than 256 bytes"},
		{"operator too long", set("operator", `"`+strings.Repeat("o", 257)+`"`), "operator: too long: more than 256 bytes"},
		{"event_time offset +24:00", set("event_time", `"2026-05-04T10:00:00+24:00"`), "event_time: not RFC 3339 with offset"},
		{"bearing string", set("bearing", `"90"`), "bearing: not a number"},
		{"bearing negative", set("bearing", `-1`), "bearing: out of range: not in 0..360"},
		{"bearing too large", set("bearing", `360.1`), "bearing: out of range: not in 0..360"},
		{"bearing overflow", set("bearing", `1e400`), "bearing: not a finite number"},
		{"speed string", set("speed_mps", `"NaN"`), "speed_mps: not a number"},
		{"speed negative", set("speed_mps", `-0.1`), "speed_mps: out of range: < 0"},
		{"speed overflow", set("speed_mps", `1e400`), "speed_mps: not a finite number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePosition([]byte(tc.in))
			checkDecodeError(t, err, tc.want)
		})
	}
}

func checkDecodeError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %T %v is not a *DecodeError", err, err)
	}
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err.Error(), want)
	}
}

func FuzzDecode(f *testing.F) {
	seeds := []string{
		validPrediction,
		validPosition,
		withField(withField(validPrediction, "vehicle_id", `"V1"`), "stop_sequence", `3`),
		`{"vehicle_id":"V7","lat":-90,"lon":180,"event_time":"2026-05-04T10:00:00+01:00","bearing":360,"speed_mps":0}`,
		``, `null`, `[]`, `{}`, `"x"`, `{"delay_s":1e309}`, `{"delay_s":"NaN"}`,
		withField(validPrediction, "delay_s", `86400.5`),
		withField(validPrediction, "event_time", `"2026-05-04T10:00:00"`),
		withField(validPrediction, "trip_id", `"\u0000"`),
		withField(validPrediction, "stop_sequence", `1e19`),
		"{\"trip_id\":\"\xff\"}",
		withField(withField(validPrediction, "line_name", `"L\u00e9"`), "stop_name", `"S"`),
		`{"trip_id":"a","trip_id":null}`,
		withField(validPrediction, "event_time", `"2026-05-04T10:00:00+24:00"`),
		withField(validPrediction, "event_time", `"2026-05-04T10:00:00-23:59"`),
		withField(validPrediction, "event_time", `"2026-05-04T10:00:00.999999999+23:60"`),
		withField(validPrediction, "trip_id", `"`+strings.Repeat("t", 256)+`"`),
		withField(validPrediction, "stop_id", `"`+strings.Repeat("s", 257)+`"`),
		withField(validPosition, "vehicle_id", `"`+strings.Repeat(`\u20ac`, 86)+`"`),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		checkMembers(t, value)
		p, err := DecodePrediction(value)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("prediction: error %T %v is not a *DecodeError", err, err)
			}
			if p != (Prediction{}) {
				t.Fatalf("prediction: error %v with a value %+v", err, p)
			}
		} else {
			for _, s := range []string{p.TripID, p.Line, p.StopID, p.Operator} {
				if s == "" || strings.IndexByte(s, 0) >= 0 || len(s) > MaxIDBytes {
					t.Fatalf("prediction: bad required string %q in %+v", s, p)
				}
			}
			if len(p.VehicleID) > MaxIDBytes {
				t.Fatalf("prediction: vehicle_id of %d bytes", len(p.VehicleID))
			}
			checkOffset(t, value)
			if strings.IndexByte(p.VehicleID, 0) >= 0 {
				t.Fatalf("prediction: NUL in vehicle_id %q", p.VehicleID)
			}
			for _, s := range []string{p.LineName, p.LineShortName, p.StopName} {
				if len(s) > MaxNameBytes || strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
					t.Fatalf("prediction: bad name %q", s)
				}
			}
			if math.IsNaN(p.DelayS) || math.IsInf(p.DelayS, 0) || math.Abs(p.DelayS) > MaxAbsDelayS {
				t.Fatalf("prediction: bad delay %v", p.DelayS)
			}
			if p.EventTime.Location() != time.UTC || p.EventTime.Nanosecond()%1000 != 0 {
				t.Fatalf("prediction: bad event time %v", p.EventTime)
			}
			if !p.HasStopSequence && p.StopSequence != 0 {
				t.Fatalf("prediction: stop_sequence %d without HasStopSequence", p.StopSequence)
			}
		}

		q, err := DecodePosition(value)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("position: error %T %v is not a *DecodeError", err, err)
			}
			return
		}
		if q.VehicleID == "" || strings.IndexByte(q.VehicleID+q.TripID+q.Line+q.Operator, 0) >= 0 {
			t.Fatalf("position: bad strings %+v", q)
		}
		for _, s := range []string{q.VehicleID, q.TripID, q.Line, q.Operator} {
			if len(s) > MaxIDBytes {
				t.Fatalf("position: an id of %d bytes", len(s))
			}
		}
		checkOffset(t, value)
		if !(math.Abs(q.Lat) <= 90) || !(math.Abs(q.Lon) <= 180) {
			t.Fatalf("position: bad coordinates %v %v", q.Lat, q.Lon)
		}
		if q.Bearing != nil && !(*q.Bearing >= 0 && *q.Bearing <= 360) {
			t.Fatalf("position: bad bearing %v", *q.Bearing)
		}
		if q.SpeedMPS != nil && !(*q.SpeedMPS >= 0) || q.SpeedMPS != nil && math.IsInf(*q.SpeedMPS, 0) {
			t.Fatalf("position: bad speed %v", *q.SpeedMPS)
		}
		if q.EventTime.Location() != time.UTC || q.EventTime.Nanosecond()%1000 != 0 {
			t.Fatalf("position: bad event time %v", q.EventTime)
		}
	})
}

// checkOffset fails unless the event_time of value, decoded, carries an
// RFC 3339 offset: Z, or hours 00-23 and minutes 00-59.
func checkOffset(t *testing.T, value []byte) {
	t.Helper()
	var v struct {
		EventTime string `json:"event_time"`
	}
	if err := json.Unmarshal(value, &v); err != nil {
		return // duplicate or odd members: the decoder's own reading is checked elsewhere
	}
	s := v.EventTime
	if strings.HasSuffix(s, "Z") {
		return
	}
	if len(s) < 6 {
		t.Fatalf("event_time %q decoded without an offset", s)
	}
	hh, errH := strconv.Atoi(s[len(s)-5 : len(s)-3])
	mm, errM := strconv.Atoi(s[len(s)-2:])
	if errH != nil || errM != nil || hh > 23 || mm > 59 {
		t.Fatalf("event_time %q decoded with an offset RFC 3339 does not have", s)
	}
}

// checkMembers compares decodeObject's scanner with encoding/json decoding
// into a map: the same members, the same raw values (the last of duplicates).
func checkMembers(t *testing.T, value []byte) {
	t.Helper()
	checkMembersOf(t, value, predictionFields)
	checkMembersOf(t, value, positionFields)
}

func checkMembersOf(t *testing.T, value []byte, names []string) {
	t.Helper()
	m, err := decodeObject(value, names)
	var ref map[string]json.RawMessage
	refErr := json.Unmarshal(value, &ref)
	isObj := refErr == nil && ref != nil && utf8.Valid(value)
	if (err == nil) != isObj {
		t.Fatalf("decodeObject error %v, encoding/json error %v, map %v", err, refErr, ref)
	}
	if err != nil {
		return
	}
	for _, n := range names {
		if got, want := m.get(n), ref[n]; !bytes.Equal(got, want) {
			t.Fatalf("member %q: scanner %q, encoding/json %q", n, got, want)
		}
	}
}

func TestMembersScanner(t *testing.T) {
	for _, in := range []string{
		validPrediction, validPosition, `{}`, ` { } `,
		`{"trip_id" : "a" , "line":[1,{"x":"]}"}],"lat":{"a":{"b":[]}},"lon":-1.5e3 }`,
		`{"tr\u0069p_id":"escaped key","trip_id\n":"other","a\"b":"c","lat":"\"}"}`,
		`{"trip_id":"a","trip_id":"b"}`, `{"lat":true,"lon":false,"bearing":null}`,
	} {
		checkMembers(t, []byte(in))
	}
}

func BenchmarkDecodePrediction(b *testing.B) {
	v := []byte(withField(withField(validPrediction, "vehicle_id", `"V7"`), "stop_sequence", `12`))
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		if _, err := DecodePrediction(v); err != nil {
			b.Fatal(err)
		}
	}
}
