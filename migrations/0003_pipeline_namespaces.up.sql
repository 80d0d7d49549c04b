-- ovstream schema, version 3 (DESIGN.md "Schema", "Pipelines, instances and
-- partitions"). One implicit transaction (see 0001); no BEGIN/COMMIT here.
--
-- 1. Pipelines are namespaces: `pipeline` comes first in the key of every table
--    that holds results, so pipelines sharing a database never read or
--    overwrite each other's rows. Rows written before belong to one pipeline:
--    the one stream_positions names (the most recently updated when several;
--    the default `ovstream` when there is none).
-- 2. Ownership and fencing per partition: stream_positions gets the owner and
--    fencing epoch of each partition, its lease heartbeat, the watermark its
--    owner reached and the Kafka topic ID (KIP-516) the offsets belong to. A
--    partition claimed but never committed has a row with NULL offsets.
-- 3. Dead letters gain the reason `rejected` (a row PostgreSQL refused).

CREATE TEMP TABLE ovs_migrate_owner ON COMMIT DROP AS
SELECT coalesce((SELECT pipeline FROM stream_positions ORDER BY updated_at DESC, pipeline LIMIT 1), 'ovstream') AS name;

-- delay_aggregates
ALTER TABLE delay_aggregates ADD COLUMN pipeline text NOT NULL DEFAULT 'ovstream';
UPDATE delay_aggregates SET pipeline = o.name FROM ovs_migrate_owner o WHERE o.name <> 'ovstream';
ALTER TABLE delay_aggregates ALTER COLUMN pipeline DROP DEFAULT,
    DROP CONSTRAINT delay_aggregates_pkey,
    ADD PRIMARY KEY (pipeline, window_start, dimension, dimension_id);
-- The seed reads max(window_start) of one pipeline through the primary key.
DROP INDEX delay_aggregates_window_end;

-- vehicle_latest
ALTER TABLE vehicle_latest ADD COLUMN pipeline text NOT NULL DEFAULT 'ovstream';
UPDATE vehicle_latest SET pipeline = o.name FROM ovs_migrate_owner o WHERE o.name <> 'ovstream';
ALTER TABLE vehicle_latest ALTER COLUMN pipeline DROP DEFAULT,
    DROP CONSTRAINT vehicle_latest_pkey,
    ADD PRIMARY KEY (pipeline, vehicle_id);

-- trip_delay_latest
ALTER TABLE trip_delay_latest ADD COLUMN pipeline text NOT NULL DEFAULT 'ovstream';
UPDATE trip_delay_latest SET pipeline = o.name FROM ovs_migrate_owner o WHERE o.name <> 'ovstream';
ALTER TABLE trip_delay_latest ALTER COLUMN pipeline DROP DEFAULT,
    DROP CONSTRAINT trip_delay_latest_pkey,
    ADD PRIMARY KEY (pipeline, trip_id);

-- dead_letters
ALTER TABLE dead_letters ADD COLUMN pipeline text NOT NULL DEFAULT 'ovstream';
UPDATE dead_letters SET pipeline = o.name FROM ovs_migrate_owner o WHERE o.name <> 'ovstream';
ALTER TABLE dead_letters ALTER COLUMN pipeline DROP DEFAULT,
    DROP CONSTRAINT dead_letters_pkey,
    ADD PRIMARY KEY (pipeline, topic, partition, "offset"),
    DROP CONSTRAINT dead_letters_reason,
    ADD CONSTRAINT dead_letters_reason CHECK (reason IN ('decode', 'future', 'late', 'rejected'));
DROP INDEX dead_letters_pending;
CREATE INDEX dead_letters_pending ON dead_letters (pipeline, reason, topic) WHERE replayed_at IS NULL;

-- stream_positions: progress, ownership and lease per partition.
ALTER TABLE stream_positions
    ALTER COLUMN next_offset DROP NOT NULL,     -- NULL: claimed, nothing committed yet
    ALTER COLUMN consumed_offset DROP NOT NULL,
    ADD CONSTRAINT stream_positions_offsets CHECK ((next_offset IS NULL) = (consumed_offset IS NULL)),
    ADD COLUMN owner        text        NULL,   -- host:pid of the instance holding it; NULL = released
    ADD COLUMN epoch        bigint      NOT NULL DEFAULT 0 CONSTRAINT stream_positions_epoch CHECK (epoch >= 0),
    ADD COLUMN heartbeat_at timestamptz NULL,   -- the owner's last claim or commit: its lease runs from here
    ADD COLUMN watermark    timestamptz NULL CONSTRAINT stream_positions_watermark CHECK (isfinite(watermark)),
    ADD COLUMN topic_id     text        NULL;   -- Kafka topic ID (KIP-516) the offsets belong to
UPDATE stream_positions s SET watermark = p.watermark FROM pipelines p WHERE p.name = s.pipeline;

-- pipelines: configuration every instance of a pipeline must share.
-- Fencing, heartbeats and watermarks are per partition now (stream_positions).
ALTER TABLE pipelines
    DROP COLUMN epoch,
    DROP COLUMN owner,
    DROP COLUMN heartbeat_at,
    DROP COLUMN watermark,
    ADD COLUMN window_size interval NULL CONSTRAINT pipelines_window_size CHECK (window_size > interval '0'),
    ADD COLUMN topics      text[]   NULL;

-- Every running instance of a pipeline, active or standby, with a liveness
-- heartbeat renewed outside the commit transaction (a long commit does not
-- make its owner look dead). A partition's lease is alive while the instance
-- that owns it (stream_positions.owner) has a heartbeat younger than the
-- lease. `ovstream status` lists them. An instance deletes its row when it stops.
CREATE TABLE pipeline_instances (
    pipeline     text        NOT NULL,
    owner        text        NOT NULL, -- host:pid
    role         text        NOT NULL CONSTRAINT pipeline_instances_role CHECK (role IN ('active', 'standby')),
    partitions   text[]      NOT NULL, -- topic/partition it owns (active) or waits for (standby)
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, owner)
);
