// Package gtfsrt turns GTFS-realtime FeedMessage files (protobuf) into the
// events of the data contract (docs/data-contract.md): arrival predictions from
// TripUpdates and vehicle positions from VehiclePositions.
//
// Guarantees: files are processed in feed-header-timestamp order (ties by
// path), so events come out in the order the agency published them; each
// (trip_id, stop_id, stop_sequence, event_time) prediction and each
// (vehicle_id, event_time) position is emitted once across all files, the first time it is seen
// (consecutive snapshots repeat unchanged updates); everything not emitted is
// counted in Result.Skipped under its reason. Mapping rules follow
// /work/shared/data/README.md, "MAPPING NOTES". With the agency's static
// GTFS feed (Options.Schedule, package gtfsstatic) an update that gives a
// predicted time and no delay gets predicted - scheduled time; without it,
// or when the schedule does not hold its trip, stop or day, it is skipped.
package gtfsrt

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/MobilityData/gtfs-realtime-bindings/golang/gtfs"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ovstream/ovstream/aggregate"
	"github.com/ovstream/ovstream/feed/gtfsstatic"
)

// Skip reasons, the keys of Result.Skipped.
const (
	SkipDuplicatePrediction = "duplicate (trip, stop, timestamp)"
	SkipDuplicatePosition   = "duplicate (vehicle, timestamp)"
	SkipNoDelay             = "no delay"
	SkipNoStopID            = "no stop_id"
	SkipNoTripID            = "no trip_id"
	SkipNoLine              = "no route_id"
	SkipNoTimestamp         = "no timestamp"
	SkipNoPosition          = "no position"
	SkipNoVehicleID         = "no vehicle id"
	SkipDeleted             = "deleted entity"
	// SkipNoShortName: with Options.LineID LineIDRouteShortName, the
	// update's route is not in routes.txt or has no route_short_name.
	SkipNoShortName = "no route_short_name for the route_id"
	// SkipTimeOnly prefixes the reasons why a stop time update that gives a
	// predicted time and no delay got no delay from Options.Schedule: the
	// text of a gtfsstatic Err value ("time only: trip not in trips.txt"),
	// or the trip's schedule_relationship when it is not SCHEDULED
	// ("time only: trip ADDED").
	SkipTimeOnly = "time only: "
)

// ErrNoOperator is wrapped by the error Load returns when an entity needs an
// operator and neither the feed nor Options.Operator gives one.
var ErrNoOperator = errors.New("no operator in the feed; pass --operator")

// Options tunes Load.
type Options struct {
	// Operator is the operator (agency) id for feeds that carry none.
	// OVapi entity ids (OperatingDay:Operator:Line:Journey) win over it.
	Operator string
	// Schedule, when set, is the agency's static GTFS feed: a stop time
	// update with a predicted time and no delay then gets delay = predicted
	// time - scheduled time (gtfsstatic.Schedule.Delay), and predictions get
	// the names of their line and stop. Without it such an update is
	// skipped as "no delay".
	Schedule *gtfsstatic.Schedule
	// LineID says what identifies a line (the data contract's line): ""
	// or LineIDRouteID, the route_id; LineIDRouteShortName, the route's
	// route_short_name from Schedule's routes.txt, for feeds whose route
	// ids carry version suffixes (Auckland: 00104-20160512154122_v40.34):
	// routes that share a short name merge into one line, and a route
	// whose short name changes splits in two. GTFS-realtime carries no
	// short names, so it needs Schedule (Validate).
	LineID string
	// OnFile, when set, is called by Load after each file (progress).
	OnFile func(FileDone)
}

// Values of Options.LineID.
const (
	LineIDRouteID        = "route_id"
	LineIDRouteShortName = "route_short_name"
)

// Validate reports, in terms of the flags of `ovstream produce`, what is
// wrong with o: an unknown LineID, or LineIDRouteShortName without a
// Schedule.
func (o Options) Validate() error {
	switch o.LineID {
	case "", LineIDRouteID:
	case LineIDRouteShortName:
		if o.Schedule == nil {
			return errors.New("--line-id route_short_name needs the routes' short names, which GTFS-realtime does not carry " +
				"(its TripDescriptor has a route_id only): give the agency's static feed with --gtfs-static")
		}
	default:
		return fmt.Errorf("--line-id %q: want route_id or route_short_name", o.LineID)
	}
	return nil
}

// FileDone is what Load reports after each file.
type FileDone struct {
	Path        string
	FeedTime    time.Time // the file's header timestamp, UTC; zero when absent
	N, Of       int       // the file is the Nth (from 1) of Of, in header-timestamp order
	Predictions int       // new predictions it gave (once-only rule applied)
	Positions   int       // new positions it gave
}

// Result is what Load read.
type Result struct {
	Predictions []aggregate.Prediction // in file order, then feed order
	Positions   []aggregate.Position   // in file order, then feed order
	// Skipped counts the stop time updates and vehicle positions not
	// emitted, by reason (the Skip* constants).
	Skipped map[string]int
	Files   int // FeedMessage files read
}

// SkippedTotal returns the sum of Skipped.
func (r *Result) SkippedTotal() int {
	n := 0
	for _, v := range r.Skipped {
		n += v
	}
	return n
}

// SkipSummary returns the skip counts as "N reason, N reason", largest first,
// or "nothing" when nothing was skipped.
func (r *Result) SkipSummary() string {
	type kv struct {
		k string
		v int
	}
	var kvs []kv
	for k, v := range r.Skipped {
		if v > 0 {
			kvs = append(kvs, kv{k, v})
		}
	}
	if len(kvs) == 0 {
		return "nothing"
	}
	slices.SortFunc(kvs, func(a, b kv) int {
		if c := cmp.Compare(b.v, a.v); c != 0 {
			return c
		}
		return strings.Compare(a.k, b.k)
	})
	parts := make([]string, len(kvs))
	for i, x := range kvs {
		parts[i] = fmt.Sprintf("%d %s", x.v, x.k)
	}
	return strings.Join(parts, ", ")
}

// Files expands paths into FeedMessage files: a file is taken as it is, a
// directory is walked recursively for files named *.pb. The result is sorted
// and without duplicates. A path that does not exist is an error; a directory
// without *.pb files is an error naming it.
func Files(paths []string) ([]string, error) {
	seen := make(map[string]bool)
	var files []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			files = append(files, p)
		}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("gtfsrt: %w", err)
		}
		if !st.IsDir() {
			add(filepath.Clean(p))
			continue
		}
		n := 0
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(d.Name(), ".pb") {
				add(path)
				n++
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("gtfsrt: walk %s: %w", p, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("gtfsrt: %s: no *.pb files", p)
		}
	}
	slices.Sort(files)
	return files, nil
}

// Load reads the FeedMessage files of paths (see Files), in header-timestamp
// order, and maps them to events. Errors name the file: one that is not a
// FeedMessage, or one with an entity that has no operator when
// opt.Operator is "" (wrapping ErrNoOperator).
func Load(paths []string, opt Options) (*Result, error) {
	if err := opt.Validate(); err != nil {
		return nil, fmt.Errorf("gtfsrt: %w", err)
	}
	files, err := Files(paths)
	if err != nil {
		return nil, err
	}
	// Order by header timestamp without keeping every decoded feed in memory:
	// the first pass reads only the header of each file.
	type feedFile struct {
		path string
		ts   uint64
	}
	ordered := make([]feedFile, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("gtfsrt: %w", err)
		}
		ts, err := headerTimestamp(b)
		if err != nil {
			return nil, fmt.Errorf("gtfsrt: %s: not a GTFS-realtime FeedMessage: %w", f, err)
		}
		ordered = append(ordered, feedFile{f, ts})
	}
	slices.SortStableFunc(ordered, func(a, b feedFile) int { return cmp.Compare(a.ts, b.ts) })

	l := loader{
		opt:      opt,
		res:      &Result{Skipped: make(map[string]int)},
		predSeen: make(map[predKey]uint64),
		posSeen:  make(map[posKey]uint64),
	}
	for i, f := range ordered {
		preds, pos := len(l.res.Predictions), len(l.res.Positions)
		b, err := os.ReadFile(f.path)
		if err != nil {
			return nil, fmt.Errorf("gtfsrt: %w", err)
		}
		var msg gtfs.FeedMessage
		if err := proto.Unmarshal(b, &msg); err != nil {
			return nil, fmt.Errorf("gtfsrt: %s: not a GTFS-realtime FeedMessage: %w", f.path, err)
		}
		if err := l.feed(&msg); err != nil {
			return nil, fmt.Errorf("gtfsrt: %s: %w", f.path, err)
		}
		l.res.Files++
		if opt.OnFile != nil {
			var at time.Time
			if f.ts != 0 {
				at = unixUTC(f.ts)
			}
			opt.OnFile(FileDone{Path: f.path, FeedTime: at, N: i + 1, Of: len(ordered),
				Predictions: len(l.res.Predictions) - preds, Positions: len(l.res.Positions) - pos})
		}
	}
	return l.res, nil
}

// headerTimestamp reads FeedMessage.header.timestamp (fields 1 and 1.2)
// without decoding the entities; 0 when absent.
func headerTimestamp(b []byte) (uint64, error) {
	var ts uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			hdr, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			b = b[n:]
			var h gtfs.FeedHeader
			if err := proto.Unmarshal(hdr, &h); err != nil {
				return 0, err
			}
			if h.Timestamp != nil {
				ts = h.GetTimestamp() // the last header wins, as in proto.Unmarshal
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return ts, nil
}

// predKey identifies one prediction for the once-only rule. stop_sequence
// (0 when absent) is part of it because a loop trip visits its first stop
// again at its end: OVapi's 2014-11-30 snapshot has 35 such second visits,
// with their own delays, in ONE snapshot. Repeated snapshots repeat the
// sequence too, so they are still dropped (the Auckland counts are the same
// with and without it: 4,610 and, over the 48 h archive, 543,669).
type predKey struct {
	trip, stop string
	seq        uint32
	t          int64
}

type posKey struct {
	vehicle string
	t       int64
}

type loader struct {
	opt Options
	res *Result
	// The keys emitted so far, each with the number of the last feed that
	// held it (Stream forgets keys that are absent and old).
	predSeen map[predKey]uint64
	posSeen  map[posKey]uint64
	feeds    uint64 // feeds mapped so far
	// With track, the keys first seen in the current feed (Stream undoes them
	// when the feed fails half-way).
	track   bool
	newPred []predKey
	newPos  []posKey
}

// ovapiID matches OVapi entity ids: OperatingDay:Operator:Line:Journey,
// e.g. 2014-11-30:CXX:L019:7062.
var ovapiID = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}:([^:]+):([^:]+):[^:]+$`)

// operatorLine returns the operator and line of an entity: from an OVapi
// entity id when route_id is empty, else route_id and opt.Operator.
func (l *loader) operatorLine(entityID, routeID string) (operator, line string, err error) {
	if routeID == "" {
		if m := ovapiID.FindStringSubmatch(entityID); m != nil {
			return m[1], m[1] + ":" + m[2], nil
		}
	}
	if l.opt.Operator == "" {
		return "", "", ErrNoOperator
	}
	return l.opt.Operator, routeID, nil
}

// lineID returns the line of route routeID under opt.LineID: routeID
// itself, or its route_short_name (ok false when routes.txt has none for it).
func (l *loader) lineID(routeID string) (line string, ok bool) {
	if l.opt.LineID != LineIDRouteShortName || routeID == "" {
		return routeID, true
	}
	if l.opt.Schedule == nil { // Validate refuses this; a Stream made without it skips
		return "", false
	}
	r, found := l.opt.Schedule.Route(routeID)
	return r.ShortName, found && r.ShortName != ""
}

func (l *loader) feed(msg *gtfs.FeedMessage) error {
	l.feeds++
	headerTS := msg.GetHeader().GetTimestamp()
	for _, e := range msg.GetEntity() {
		if e.GetIsDeleted() {
			l.res.Skipped[SkipDeleted]++
			continue
		}
		if tu := e.GetTripUpdate(); tu != nil {
			if err := l.tripUpdate(e.GetId(), tu, headerTS); err != nil {
				return err
			}
		}
		if vp := e.GetVehicle(); vp != nil {
			if err := l.vehiclePosition(e.GetId(), vp, headerTS); err != nil {
				return err
			}
		}
	}
	return nil
}

func unixUTC(s uint64) time.Time { return time.Unix(int64(s), 0).UTC() }

func (l *loader) tripUpdate(entityID string, tu *gtfs.TripUpdate, headerTS uint64) error {
	stus := tu.GetStopTimeUpdate()
	if len(stus) == 0 {
		return nil
	}
	skip := func(reason string) { l.res.Skipped[reason] += len(stus) }
	tripID := tu.GetTrip().GetTripId()
	if tripID == "" {
		skip(SkipNoTripID)
		return nil
	}
	routeID := tu.GetTrip().GetRouteId()
	operator, route, err := l.operatorLine(entityID, routeID)
	if err != nil {
		return fmt.Errorf("%w (trip %s, entity %s)", err, tripID, entityID)
	}
	if route == "" {
		skip(SkipNoLine)
		return nil
	}
	line, ok := l.lineID(routeID)
	if !ok {
		skip(SkipNoShortName)
		return nil
	}
	if routeID == "" {
		line = route // OVapi: operator:line from the entity id
	}
	ts := headerTS
	if tu.Timestamp != nil && tu.GetTimestamp() != 0 {
		ts = tu.GetTimestamp()
	}
	if ts == 0 {
		skip(SkipNoTimestamp)
		return nil
	}
	eventTime := unixUTC(ts)
	vehicleID := tu.GetVehicle().GetId()
	startDate, _ := aggregate.ParseServiceDate(tu.GetTrip().GetStartDate()) // 0: absent or not YYYYMMDD
	for _, stu := range stus {
		var delay int64
		stopID := stu.GetStopId()
		arrival := predictedTime(stu)
		serviceDay := startDate
		switch {
		case stu.GetArrival() != nil && stu.GetArrival().Delay != nil:
			delay = int64(stu.GetArrival().GetDelay())
			if arrival.IsZero() {
				arrival, serviceDay = l.scheduledArrival(tu.GetTrip(), stu, delay, false, eventTime, serviceDay)
			}
		case stu.GetDeparture() != nil && stu.GetDeparture().Delay != nil:
			delay = int64(stu.GetDeparture().GetDelay())
			if arrival.IsZero() {
				arrival, serviceDay = l.scheduledArrival(tu.GetTrip(), stu, delay, true, eventTime, serviceDay)
			}
		case l.opt.Schedule != nil && (stu.GetArrival().GetTime() != 0 || stu.GetDeparture().GetTime() != 0):
			m, reason := l.scheduledDelay(tu.GetTrip(), stu)
			if reason != "" {
				l.res.Skipped[reason]++
				continue
			}
			delay = m.DelayS
			if stopID == "" {
				stopID = m.StopID
			}
			if serviceDay == 0 {
				serviceDay, _ = aggregate.ParseServiceDate(m.ServiceDay)
			}
		default:
			l.res.Skipped[SkipNoDelay]++
			continue
		}
		if stopID == "" {
			l.res.Skipped[SkipNoStopID]++
			continue
		}
		k := predKey{tripID, stopID, stu.GetStopSequence(), int64(ts)}
		_, dup := l.predSeen[k]
		l.predSeen[k] = l.feeds
		if dup {
			l.res.Skipped[SkipDuplicatePrediction]++
			continue
		}
		if l.track {
			l.newPred = append(l.newPred, k)
		}
		p := aggregate.Prediction{
			TripID:          tripID,
			Line:            line,
			StopID:          stopID,
			Operator:        operator,
			DelayS:          float64(delay),
			EventTime:       eventTime,
			VehicleID:       vehicleID,
			StopSequence:    int64(stu.GetStopSequence()),
			HasStopSequence: stu.StopSequence != nil,
			StartDate:       serviceDay,
			ArrivalTime:     arrival,
		}
		l.name(&p, route)
		l.res.Predictions = append(l.res.Predictions, p)
	}
	return nil
}

// predictedTime returns the predicted arrival of stu, UTC: its arrival
// StopTimeEvent.time, else its departure's (a first stop has only a
// departure); zero when it gives neither.
func predictedTime(stu *gtfs.TripUpdate_StopTimeUpdate) time.Time {
	if t := stu.GetArrival().GetTime(); t != 0 {
		return time.Unix(t, 0).UTC()
	}
	if t := stu.GetDeparture().GetTime(); t != 0 {
		return time.Unix(t, 0).UTC()
	}
	return time.Time{}
}

// scheduledArrival returns, for a stop time update that gives a delay
// (of the departure when departure) and no time, its scheduled time + delay
// from Options.Schedule, and the service day: serviceDay when not 0, else
// the one the schedule matched. Without a Schedule, or when it does not
// hold the trip, stop or day, or the trip does not run as scheduled, the
// time is zero and serviceDay unchanged: the prediction goes out without
// arrival_time. The day is looked for near eventTime - delay (the schedule
// a prediction made at eventTime is about is within 12 h of that).
func (l *loader) scheduledArrival(td *gtfs.TripDescriptor, stu *gtfs.TripUpdate_StopTimeUpdate, delay int64, departure bool,
	eventTime time.Time, serviceDay int32) (time.Time, int32) {
	if l.opt.Schedule == nil || td.GetScheduleRelationship() != gtfs.TripDescriptor_SCHEDULED {
		return time.Time{}, serviceDay
	}
	m, err := l.opt.Schedule.Scheduled(gtfsstatic.Event{
		TripID:          td.GetTripId(),
		StartDate:       td.GetStartDate(),
		StopSequence:    stu.GetStopSequence(),
		HasStopSequence: stu.StopSequence != nil,
		StopID:          stu.GetStopId(),
	}, departure, eventTime.Add(-time.Duration(delay)*time.Second))
	if err != nil {
		return time.Time{}, serviceDay
	}
	if serviceDay == 0 {
		serviceDay, _ = aggregate.ParseServiceDate(m.ServiceDay)
	}
	return m.Scheduled.Add(time.Duration(delay) * time.Second), serviceDay
}

// scheduledDelay computes the delay of a stop time update that gives
// predicted times and no delay from Options.Schedule; reason is the skip
// reason when there is none. Only trips that run as scheduled are matched:
// an ADDED or DUPLICATED trip's times do not follow its trip_id's schedule
// (GTFS-realtime reference, TripDescriptor.ScheduleRelationship), and a
// CANCELED one has none.
func (l *loader) scheduledDelay(td *gtfs.TripDescriptor, stu *gtfs.TripUpdate_StopTimeUpdate) (gtfsstatic.Match, string) {
	if rel := td.GetScheduleRelationship(); rel != gtfs.TripDescriptor_SCHEDULED {
		return gtfsstatic.Match{}, SkipTimeOnly + "trip " + rel.String()
	}
	m, err := l.opt.Schedule.Delay(gtfsstatic.Event{
		TripID:          td.GetTripId(),
		StartDate:       td.GetStartDate(),
		StopSequence:    stu.GetStopSequence(),
		HasStopSequence: stu.StopSequence != nil,
		StopID:          stu.GetStopId(),
		Arrival:         stu.GetArrival().GetTime(),
		Departure:       stu.GetDeparture().GetTime(),
	})
	if err != nil {
		return m, SkipTimeOnly + err.Error()
	}
	return m, ""
}

// name fills the optional names of p from Options.Schedule: line_name is
// route_long_name (route_short_name when that is empty) of route,
// line_short_name is route_short_name, stop_name is stop_name. Names are
// made to meet the data contract (ContractName), so that a name never costs
// an event.
func (l *loader) name(p *aggregate.Prediction, route string) {
	if l.opt.Schedule == nil {
		return
	}
	if r, ok := l.opt.Schedule.Route(route); ok {
		p.LineName, p.LineShortName = ContractName(cmp.Or(r.LongName, r.ShortName)), ContractName(r.ShortName)
	}
	stop, _ := l.opt.Schedule.StopName(p.StopID)
	p.StopName = ContractName(stop)
}

// ContractName returns name as the data contract accepts it (line_name,
// line_short_name, stop_name): invalid UTF-8 (a static feed in Latin-1)
// replaced by U+FFFD, NUL removed, and cut at a character boundary to at
// most aggregate.MaxNameBytes bytes.
func ContractName(name string) string {
	name = strings.ReplaceAll(strings.ToValidUTF8(name, "\uFFFD"), "\x00", "")
	if len(name) <= aggregate.MaxNameBytes {
		return name
	}
	cut := aggregate.MaxNameBytes
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut]
}

// float32 values (bearing, speed) are carried as their shortest decimal
// form, so 22.352 stays 22.352 rather than 22.35199928283691.
func widen(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}

func (l *loader) vehiclePosition(entityID string, vp *gtfs.VehiclePosition, headerTS uint64) error {
	vehicleID := vp.GetVehicle().GetId()
	if vehicleID == "" {
		vehicleID = entityID
	}
	if vehicleID == "" {
		l.res.Skipped[SkipNoVehicleID]++
		return nil
	}
	pos := vp.GetPosition()
	if pos == nil {
		l.res.Skipped[SkipNoPosition]++
		return nil
	}
	operator, line, err := l.operatorLine(entityID, vp.GetTrip().GetRouteId())
	if err != nil {
		return fmt.Errorf("%w (vehicle %s, entity %s)", err, vehicleID, entityID)
	}
	if routeID := vp.GetTrip().GetRouteId(); routeID != "" {
		line, _ = l.lineID(routeID) // a position's line is optional: "" without a short name
	}
	ts := headerTS
	if vp.Timestamp != nil && vp.GetTimestamp() != 0 {
		ts = vp.GetTimestamp()
	}
	if ts == 0 {
		l.res.Skipped[SkipNoTimestamp]++
		return nil
	}
	k := posKey{vehicleID, int64(ts)}
	_, dup := l.posSeen[k]
	l.posSeen[k] = l.feeds
	if dup {
		l.res.Skipped[SkipDuplicatePosition]++
		return nil
	}
	if l.track {
		l.newPos = append(l.newPos, k)
	}
	p := aggregate.Position{
		VehicleID: vehicleID,
		Lat:       widen(pos.GetLatitude()),
		Lon:       widen(pos.GetLongitude()),
		EventTime: unixUTC(ts),
		TripID:    vp.GetTrip().GetTripId(),
		Line:      line,
		Operator:  operator,
	}
	if pos.Bearing != nil {
		b := widen(pos.GetBearing())
		p.Bearing = &b
	}
	if pos.Speed != nil {
		s := widen(pos.GetSpeed())
		p.SpeedMPS = &s
	}
	l.res.Positions = append(l.res.Positions, p)
	return nil
}
