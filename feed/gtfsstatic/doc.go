// Package gtfsstatic loads the part of a static GTFS feed (a zip file or a
// folder of .txt files) that turns a GTFS-realtime predicted time into a
// delay: the agency time zone (agency.txt), the service calendar
// (calendar.txt, calendar_dates.txt), each trip's stop times (trips.txt,
// stop_times.txt), the frequency-based trips (frequencies.txt), and the
// names of routes and stops (routes.txt, stops.txt).
//
// Guarantee: Schedule.Delay returns predicted time - scheduled time in whole
// seconds for one trip, stop and service day, with GTFS times measured from
// "noon minus 12 h" of the service day in the agency time zone (GTFS
// reference, stop_times.txt arrival_time: times past 24:00:00 belong to the
// service day they started on, and on days when daylight saving time
// changes the day does not start at midnight). It never guesses: a trip,
// stop or service day the schedule does not hold is an error naming why.
//
// Memory: only what Delay needs is kept (per stop time: stop_sequence,
// arrival and departure seconds and an interned stop_id; about 16 bytes);
// shapes.txt and the other columns are never read.
package gtfsstatic
