package aggregate

import (
	"fmt"
	"time"
)

// PartitionID names one Kafka topic partition.
type PartitionID struct {
	Topic     string
	Partition int32
}

func (p PartitionID) String() string { return fmt.Sprintf("%s/%d", p.Topic, p.Partition) }

// Prediction is one arrival prediction (topic arrival_predictions).
type Prediction struct {
	TripID    string    // GTFS trip_id, required
	Line      string    // GTFS route_id, required
	StopID    string    // station whose arrival is predicted, required
	Operator  string    // agency / operator id, required
	DelayS    float64   // predicted arrival delay in seconds, negative = early; finite, |d| <= 86400
	EventTime time.Time // when the prediction was observed, UTC, whole microseconds
	VehicleID string    // optional, "" when absent
	// StopSequence is the GTFS stop_sequence; HasStopSequence tells whether it was present.
	StopSequence    int64
	HasStopSequence bool
	// StartDate is the trip's service day, GTFS-realtime
	// TripDescriptor.start_date, as the number YYYYMMDD (20160519): it can
	// differ from the calendar day of the arrival for trips after midnight.
	// 0 when absent. start_date of the data contract.
	StartDate int32
	// ArrivalTime is the predicted arrival (GTFS-realtime StopTimeEvent.time,
	// or the scheduled time + delay), UTC, whole microseconds; zero when
	// absent. arrival_time of the data contract.
	ArrivalTime time.Time
	// LineName, LineShortName and StopName are optional names from static
	// GTFS (route_long_name, route_short_name, stop_name), "" when absent:
	// line_name, line_short_name and stop_name of the data contract, at most
	// MaxNameBytes each. DecodePredictionNames leaves them "" and returns
	// them as bytes (RawNames); the run loop keeps them in Names.
	LineName, LineShortName, StopName string
}

// Position is one vehicle position (topic vehicle_positions).
type Position struct {
	VehicleID string    // required
	Lat       float64   // degrees, -90..90, required
	Lon       float64   // degrees, -180..180, required
	EventTime time.Time // UTC, whole microseconds, required
	TripID    string    // optional
	Line      string    // optional
	Operator  string    // optional
	Bearing   *float64  // degrees 0..360, optional
	SpeedMPS  *float64  // metres per second >= 0, optional
}

// DecodeError says why a message does not meet the data contract. Its text is
// "FIELD: REASON", e.g. "delay_s: not a finite number"; Field is "" when the
// whole payload is at fault ("not a JSON object").
type DecodeError struct {
	Field  string
	Reason string
}

func (e *DecodeError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Dimensions of delay_aggregates rows. Each prediction counts in one row of each.
const (
	DimLine     = "line"     // dimension_id = line
	DimStation  = "station"  // dimension_id = stop_id
	DimOperator = "operator" // dimension_id = operator
	DimNetwork  = "network"  // dimension_id = NetworkID
	NetworkID   = "all"
)

// Row is one finalized delay_aggregates row: the statistics of one
// (window, dimension, dimension_id) in seconds, and the exact distribution
// they come from.
type Row struct {
	WindowStart time.Time // UTC
	WindowEnd   time.Time // UTC, WindowStart + window size
	Dimension   string    // DimLine, DimStation, DimOperator or DimNetwork
	DimensionID string
	Operator    string // the one operator of the row's events; "" when they had several
	Count       int64  // > 0
	Mean        float64
	P90         float64 // = percentile_cont(0.9)
	Min         float64
	Max         float64
	// Values are the distinct delays of the row's events, ascending (-0
	// held as 0), and Counts[i] events had Values[i] (> 0, summing to
	// Count): delay_values and delay_counts. Any statistic over any set of
	// rows follows from them exactly (Summarize). Rows built by the
	// Windower and by Merge always have them.
	Values []float64
	Counts []int64
}
