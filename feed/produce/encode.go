package produce

import (
	"math"
	"strconv"
	"time"

	"github.com/ovstream/ovstream/aggregate"
)

// EncodePrediction returns p as one arrival_predictions message value, the
// JSON object of the data contract (docs/data-contract.md): trip_id, line, stop_id,
// operator, delay_s, event_time (RFC 3339 in UTC, "2006-01-02T15:04:05Z"),
// then vehicle_id, stop_sequence, start_date (YYYYMMDD), arrival_time (RFC
// 3339 in UTC), line_name, line_short_name and stop_name when present.
//
// It encodes whatever it is given, so bad events can be produced on purpose:
// a non-finite delay is written as a string ("NaN", "+Inf"), strings are
// written byte for byte (only '"', '\\' and control characters are escaped, so
// NUL becomes \u0000 and invalid UTF-8 stays invalid), and the consumer
// dead-letters such values with its precise reason.
func EncodePrediction(p aggregate.Prediction) []byte {
	b := make([]byte, 0, 192)
	b = append(b, `{"trip_id":`...)
	b = appendString(b, p.TripID)
	b = append(b, `,"line":`...)
	b = appendString(b, p.Line)
	b = append(b, `,"stop_id":`...)
	b = appendString(b, p.StopID)
	b = append(b, `,"operator":`...)
	b = appendString(b, p.Operator)
	b = append(b, `,"delay_s":`...)
	b = appendNumber(b, p.DelayS)
	b = append(b, `,"event_time":`...)
	b = appendTime(b, p.EventTime)
	if p.VehicleID != "" {
		b = append(b, `,"vehicle_id":`...)
		b = appendString(b, p.VehicleID)
	}
	if p.HasStopSequence {
		b = append(b, `,"stop_sequence":`...)
		b = strconv.AppendInt(b, p.StopSequence, 10)
	}
	if p.StartDate != 0 {
		b = append(b, `,"start_date":`...)
		b = appendString(b, aggregate.ServiceDateString(p.StartDate))
	}
	if !p.ArrivalTime.IsZero() {
		b = append(b, `,"arrival_time":`...)
		b = appendTime(b, p.ArrivalTime)
	}
	for _, f := range [...]struct{ name, value string }{
		{`,"line_name":`, p.LineName}, {`,"line_short_name":`, p.LineShortName}, {`,"stop_name":`, p.StopName},
	} {
		if f.value != "" {
			b = append(b, f.name...)
			b = appendString(b, f.value)
		}
	}
	return append(b, '}')
}

// EncodePosition returns p as one vehicle_positions message value: vehicle_id,
// lat, lon, event_time, then trip_id, line, operator, bearing and speed_mps
// when present (non-empty, non-nil). Same rules as EncodePrediction.
func EncodePosition(p aggregate.Position) []byte {
	b := make([]byte, 0, 192)
	b = append(b, `{"vehicle_id":`...)
	b = appendString(b, p.VehicleID)
	b = append(b, `,"lat":`...)
	b = appendNumber(b, p.Lat)
	b = append(b, `,"lon":`...)
	b = appendNumber(b, p.Lon)
	b = append(b, `,"event_time":`...)
	b = appendTime(b, p.EventTime)
	if p.TripID != "" {
		b = append(b, `,"trip_id":`...)
		b = appendString(b, p.TripID)
	}
	if p.Line != "" {
		b = append(b, `,"line":`...)
		b = appendString(b, p.Line)
	}
	if p.Operator != "" {
		b = append(b, `,"operator":`...)
		b = appendString(b, p.Operator)
	}
	if p.Bearing != nil {
		b = append(b, `,"bearing":`...)
		b = appendNumber(b, *p.Bearing)
	}
	if p.SpeedMPS != nil {
		b = append(b, `,"speed_mps":`...)
		b = appendNumber(b, *p.SpeedMPS)
	}
	return append(b, '}')
}

// appendTime writes t in UTC as RFC 3339, whole seconds as "...:05Z".
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendNumber writes f as a JSON number like encoding/json does; NaN and
// infinities, which JSON cannot hold, as the strings "NaN", "+Inf", "-Inf".
func appendNumber(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.AppendQuote(b, strconv.FormatFloat(f, 'g', -1, 64))
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(b, f, format, -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string, byte for byte apart from escapes.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
