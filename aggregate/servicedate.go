package aggregate

import "time"

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
