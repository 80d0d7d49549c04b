-- Stop visits: one row per (pipeline, trip, service day, stop) with the
-- visit's last prediction (by event time, ties by partition and offset) and
-- how many predictions it had, upserted by every commit in the same
-- transaction as the offsets (store/visits.go). stop_key is the
-- stop_sequence in decimal when the predictions give one, else 'stop_id:'
-- followed by the stop_id.
CREATE TABLE stop_visits (
    pipeline        text             NOT NULL,
    trip_id         text             NOT NULL,
    start_date      date             NOT NULL,
    stop_key        text             NOT NULL,
    line            text             NOT NULL,
    operator        text             NOT NULL,
    stop_id         text             NOT NULL,
    stop_sequence   bigint           NULL,
    arrival_time    timestamptz      NOT NULL,
    delay_s         double precision NOT NULL,
    predictions     bigint           NOT NULL CONSTRAINT stop_visits_predictions CHECK (predictions > 0),
    last_event_time timestamptz      NOT NULL,
    last_partition  integer          NOT NULL,
    last_offset     bigint           NOT NULL,
    updated_at      timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, trip_id, start_date, stop_key)
);
CREATE INDEX stop_visits_day ON stop_visits (pipeline, start_date);

-- Predictions that formed no visit (no start_date), per source partition:
-- counted exactly once like the visits; `status` sums them.
CREATE TABLE stop_visit_counts (
    pipeline           text    NOT NULL,
    topic              text    NOT NULL,
    partition          integer NOT NULL,
    without_start_date bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (pipeline, topic, partition)
);
