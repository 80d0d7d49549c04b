-- ovstream schema, version 1 (DESIGN.md "Schema"). All times are timestamptz, in UTC.
-- golang-migrate sends this file as ONE simple-protocol query, which PostgreSQL
-- runs in one implicit transaction: it applies entirely or not at all. Do not add
-- BEGIN/COMMIT here (an error after an explicit BEGIN leaves the session aborted).

-- Finalized 5-minute windows. A commit REPLACES a row (never adds to it).
CREATE TABLE delay_aggregates (
    window_start timestamptz      NOT NULL,
    window_end   timestamptz      NOT NULL,
    dimension    text             NOT NULL
        CONSTRAINT delay_aggregates_dimension CHECK (dimension IN ('line', 'station', 'operator', 'network')),
    dimension_id text             NOT NULL,
    operator     text             NULL, -- the one operator of the row's events, NULL when several
    event_count  bigint           NOT NULL CONSTRAINT delay_aggregates_event_count CHECK (event_count > 0),
    mean_delay_s double precision NOT NULL,
    p90_delay_s  double precision NOT NULL, -- = percentile_cont(0.9)
    min_delay_s  double precision NOT NULL,
    max_delay_s  double precision NOT NULL,
    updated_at   timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (window_start, dimension, dimension_id),
    CONSTRAINT delay_aggregates_window CHECK (window_end > window_start),
    CONSTRAINT delay_aggregates_stats CHECK (
        min_delay_s <= p90_delay_s AND p90_delay_s <= max_delay_s
        AND min_delay_s <= mean_delay_s AND mean_delay_s <= max_delay_s)
);
-- Start-up seeds the watermark with max(window_end).
CREATE INDEX delay_aggregates_window_end ON delay_aggregates (window_end);

-- Newest position per vehicle (greatest observed_at; on a tie the later offset).
CREATE TABLE vehicle_latest (
    vehicle_id      text             PRIMARY KEY,
    trip_id         text             NULL,
    line            text             NULL,
    operator        text             NULL,
    lat             double precision NOT NULL CONSTRAINT vehicle_latest_lat CHECK (lat BETWEEN -90 AND 90),
    lon             double precision NOT NULL CONSTRAINT vehicle_latest_lon CHECK (lon BETWEEN -180 AND 180),
    bearing         double precision NULL CONSTRAINT vehicle_latest_bearing CHECK (bearing BETWEEN 0 AND 360),
    speed_mps       double precision NULL CONSTRAINT vehicle_latest_speed CHECK (speed_mps >= 0),
    observed_at     timestamptz      NOT NULL,
    kafka_partition integer          NOT NULL CHECK (kafka_partition >= 0),
    kafka_offset    bigint           NOT NULL CHECK (kafka_offset >= 0),
    updated_at      timestamptz      NOT NULL DEFAULT now()
);

-- Newest prediction per trip (greatest observed_at; on a tie the later offset).
CREATE TABLE trip_delay_latest (
    trip_id         text             PRIMARY KEY,
    line            text             NOT NULL,
    stop_id         text             NOT NULL,
    operator        text             NOT NULL,
    vehicle_id      text             NULL,
    stop_sequence   bigint           NULL,
    delay_s         double precision NOT NULL CONSTRAINT trip_delay_latest_delay CHECK (abs(delay_s) <= 86400),
    observed_at     timestamptz      NOT NULL,
    kafka_partition integer          NOT NULL CHECK (kafka_partition >= 0),
    kafka_offset    bigint           NOT NULL CHECK (kafka_offset >= 0),
    updated_at      timestamptz      NOT NULL DEFAULT now()
);

-- Records that were not aggregated, byte for byte (bytea: payloads may hold NUL
-- bytes or invalid UTF-8). One row per record.
CREATE TABLE dead_letters (
    topic      text        NOT NULL,
    partition  integer     NOT NULL CHECK (partition >= 0),
    "offset"   bigint      NOT NULL CHECK ("offset" >= 0),
    key        bytea       NULL,
    value      bytea       NULL,
    reason     text        NOT NULL CONSTRAINT dead_letters_reason CHECK (reason IN ('decode', 'future', 'late')),
    error      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition, "offset")
);

-- Per pipeline and partition: the committable offset (every record below it is
-- durable) and one past the last record consumed. Never moves backwards.
CREATE TABLE stream_positions (
    pipeline        text        NOT NULL,
    topic           text        NOT NULL,
    partition       integer     NOT NULL CHECK (partition >= 0),
    next_offset     bigint      NOT NULL CONSTRAINT stream_positions_next CHECK (next_offset >= 0),
    consumed_offset bigint      NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, topic, partition),
    CONSTRAINT stream_positions_consumed CHECK (consumed_offset >= next_offset)
);

-- One row per pipeline: the fencing epoch (each claim adds one; a commit whose
-- epoch is not the current one writes nothing) and the watermark last committed.
CREATE TABLE pipelines (
    name         text        PRIMARY KEY,
    epoch        bigint      NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    owner        text        NULL,
    heartbeat_at timestamptz NULL,
    watermark    timestamptz NULL CONSTRAINT pipelines_watermark CHECK (isfinite(watermark))
);
