package dashboard

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/store"
)

// instanceLease judges whether an instance is alive on the health page: the
// default --lease of run.
const instanceLease = 15 * time.Second

// PartitionLag is one partition's lag: the records not yet read, the high
// water mark minus the consumed position (the log start when nothing is
// stored); and the records held: read, not yet committable (the consumed
// position minus the stored next offset). A nil field is unknown.
type PartitionLag struct {
	Partition  string `json:"partition"` // topic/partition
	NextOffset *int64 `json:"next_offset"`
	HighWater  *int64 `json:"high_water"`
	Lag        *int64 `json:"lag"`
	Held       *int64 `json:"held"`
}

// LagFunc reads the lag of a pipeline's partitions, given what the database
// holds of them (st). An error with some partitions still returned shows
// those and the error.
type LagFunc func(ctx context.Context, pipeline string, st *store.Status) ([]PartitionLag, error)

// Lag is the health page's lag section.
type Lag struct {
	Known      bool           `json:"known"`  // every partition's lag could be read
	Source     string         `json:"source"` // "kafka" (serve --brokers), "run" (this instance's own gauges) or ""
	Total      *int64         `json:"total"`  // null: unknown
	Note       string         `json:"note,omitempty"`
	Partitions []PartitionLag `json:"partitions"`
}

// Merge is the merge lag of a split pipeline (store.MergeLag).
type Merge struct {
	PendingWindows int        `json:"pending_windows"`
	OldestPending  *time.Time `json:"oldest_pending"`
	MergedUntil    *time.Time `json:"merged_until"`
	Holding        []string   `json:"holding"`
}

// DeadLetters counts one reason's dead letters.
type DeadLetters struct {
	Reason   string `json:"reason"`
	Total    int64  `json:"total"`
	Replayed int64  `json:"replayed"`
}

// Instance is a running instance of the pipeline (pipeline_instances).
type Instance struct {
	Owner         string  `json:"owner"`
	Role          string  `json:"role"`
	Partitions    int     `json:"partitions"`
	HeartbeatAgeS float64 `json:"heartbeat_age_s"`
	Alive         bool    `json:"alive"`
	// ClosableAgeS is the age of its oldest window closable but not yet
	// written, seconds, as of its last heartbeat (store.Instance); 0: none.
	ClosableAgeS float64 `json:"closable_age_s"`
}

// Freshness is the health page's freshness card: the oldest window that is
// closable (the watermark passed its end) but not yet written, over the
// running instances (pipeline_instances.closable_since).
type Freshness struct {
	ClosableAgeS  float64    `json:"closable_age_s"`  // the database's now() - ClosableSince; 0 when none
	ClosableSince *time.Time `json:"closable_since"`  // null: every closable window is written
	Owner         string     `json:"owner,omitempty"` // the instance holding it
}

// Health is GET api/health?pipeline&tz: the pipeline's progress as the
// database holds it, the lag when known, and, under run, the instance's own.
type Health struct {
	Query           Query         `json:"query"`
	Claimed         bool          `json:"claimed"`           // a run ever claimed the pipeline
	Watermark       *time.Time    `json:"watermark"`         // the lowest watermark stored for its partitions
	NewestWindowEnd *time.Time    `json:"newest_window_end"` // of delay_aggregates
	LastCommit      *time.Time    `json:"last_commit"`       // the newest stream_positions.updated_at
	Lag             Lag           `json:"lag"`
	Merge           Merge         `json:"merge"`
	DeadLetters     []DeadLetters `json:"dead_letters"` // by reason
	Instances       []Instance    `json:"instances"`
	Freshness       Freshness     `json:"freshness"`
	Run             *Live         `json:"run"` // this instance (run --metrics-addr) when it runs the pipeline shown; else null
	// Replica is how old what the page shows is when the server read is a
	// hot standby (store.Replica); null on a primary.
	Replica *store.Replica `json:"replica"`
}

func (h *Handler) health(ctx context.Context, r *http.Request) (any, error) {
	v := r.URL.Query()
	loc, err := h.location(v)
	if err != nil {
		return nil, err
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.In(loc)
		return &t
	}
	out := &Health{DeadLetters: []DeadLetters{}, Instances: []Instance{}, Lag: Lag{Partitions: []PartitionLag{}}}
	var st *store.Status
	err = h.do(ctx, func(c *pgx.Conn) error {
		pipeline, err := h.pipelineParam(ctx, c, v)
		if err != nil {
			return err
		}
		if err := checkPipeline(ctx, c, pipeline); err != nil {
			return err
		}
		out.Query = Query{Pipeline: pipeline, TZ: loc.String()}
		if st, err = store.ReadStatus(ctx, c, pipeline); err != nil {
			return err
		}
		ml, err := store.ReadMergeLag(ctx, c, pipeline)
		if err != nil {
			return err
		}
		instances, err := store.ReadInstances(ctx, c, pipeline, instanceLease)
		if err != nil {
			return err
		}
		if out.Replica, err = store.ReadReplica(ctx, c); err != nil {
			return err
		}
		out.Merge = Merge{PendingWindows: ml.Pending, OldestPending: at(ml.Oldest), MergedUntil: at(ml.MergedUntil), Holding: ml.Holding}
		if out.Merge.Holding == nil {
			out.Merge.Holding = []string{}
		}
		for _, in := range instances {
			out.Instances = append(out.Instances, Instance{Owner: in.Owner, Role: in.Role, Partitions: len(in.Partitions),
				HeartbeatAgeS: in.HeartbeatAge.Seconds(), Alive: in.Alive, ClosableAgeS: in.ClosableAge.Seconds()})
			if !in.ClosableSince.IsZero() && (out.Freshness.ClosableSince == nil || in.ClosableSince.Before(*out.Freshness.ClosableSince)) {
				out.Freshness = Freshness{ClosableAgeS: in.ClosableAge.Seconds(), ClosableSince: at(in.ClosableSince), Owner: in.Owner}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if p := st.Pipeline; p != nil {
		out.Claimed, out.Watermark = true, at(p.Watermark)
	}
	out.NewestWindowEnd = at(st.NewestWindowEnd)
	var last time.Time
	for _, p := range st.Positions {
		if p.UpdatedAt.After(last) {
			last = p.UpdatedAt
		}
	}
	out.LastCommit = at(last)
	for _, reason := range slices.Sorted(maps.Keys(st.DeadLetters)) {
		c := st.DeadLetters[reason]
		out.DeadLetters = append(out.DeadLetters, DeadLetters{Reason: reason, Total: c.Total, Replayed: c.Replayed})
	}
	var live *Live
	if h.cfg.Live != nil {
		if l := h.cfg.Live(); l.Pipeline == out.Query.Pipeline {
			live = &l
			live.in(loc)
			out.Run = live
		}
	}
	switch {
	case live != nil:
		out.Lag = lagOf("run", live.Lag, nil)
		if !live.Assigned {
			out.Lag.Known, out.Lag.Total, out.Lag.Note = false, nil, "this instance has no partitions assigned yet"
		}
	case h.cfg.Lag != nil:
		ps, err := h.cfg.Lag(ctx, out.Query.Pipeline, st)
		out.Lag = lagOf("kafka", ps, err)
	default:
		out.Lag.Note = "unknown: start serve with --brokers to read the high water marks from Kafka"
	}
	return out, nil
}

// lagOf sums the partitions' lags: the total is known when every lag is.
func lagOf(source string, ps []PartitionLag, err error) Lag {
	l := Lag{Source: source, Partitions: ps, Known: err == nil && len(ps) > 0}
	if l.Partitions == nil {
		l.Partitions = []PartitionLag{}
	}
	var total int64
	for _, p := range ps {
		if p.Lag == nil {
			l.Known = false
			break
		}
		total += *p.Lag
	}
	if l.Known {
		l.Total = &total
	}
	switch {
	case err != nil:
		l.Note = "unknown: " + err.Error()
	case len(ps) == 0:
		l.Note = "unknown: no partitions"
	}
	return l
}
