// Package otp exports the realized delays of the stop visits (table
// stop_visits) as the empirical delay data of OpenTripPlanner 2.9's sandbox
// module EmpiricalDelay: p50 and p90 of the delay per service calendar, trip
// and stop, in the two CSV files its reader takes (CalendarFile and
// TripTimesFile, in a zip file or a directory).
//
// The format is OTP's parser, read in its source at tag v2.9.0
// (application/src/ext/java/org/opentripplanner/ext/empiricaldelay/
// internal/csvinput/): the file names and headers, p50 and p90 whole seconds
// in [0, MaxDelayS], stop_sequence in [0, MaxStopSequence], dates
// yyyy-MM-dd, ids without the feed id (OTP prefixes the feedId of
// build-config.json). A row OTP would drop is never written: negative
// quantiles are written as 0 (OTP has no early arrivals), and the groups
// whose quantiles exceed MaxDelayS, or whose visits have no stop_sequence,
// are left out and counted (Export.Skipped).
//
// The guarantee: every row is the nearest-rank quantiles (PostgreSQL's
// percentile_disc) of the realized delays of at least Query.MinVisits
// visits of one trip at one stop on the service days that one service id
// of the calendar covers, exactly as stored; nothing is estimated.
package otp
