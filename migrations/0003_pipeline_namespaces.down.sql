-- Back to one namespace per database: keeps the rows of ONE pipeline (the one
-- stream_positions updated last) and drops the others' results.
CREATE TEMP TABLE ovs_migrate_owner ON COMMIT DROP AS
SELECT coalesce((SELECT pipeline FROM stream_positions ORDER BY updated_at DESC, pipeline LIMIT 1), 'ovstream') AS name;

DROP TABLE IF EXISTS pipeline_instances;

ALTER TABLE pipelines
    DROP COLUMN topics,
    DROP COLUMN window_size,
    ADD COLUMN epoch bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    ADD COLUMN owner text NULL,
    ADD COLUMN heartbeat_at timestamptz NULL,
    ADD COLUMN watermark timestamptz NULL CONSTRAINT pipelines_watermark CHECK (isfinite(watermark));
UPDATE pipelines p SET watermark = (SELECT min(s.watermark) FROM stream_positions s WHERE s.pipeline = p.name);

DELETE FROM stream_positions WHERE next_offset IS NULL;
ALTER TABLE stream_positions
    DROP COLUMN topic_id,
    DROP COLUMN watermark,
    DROP COLUMN heartbeat_at,
    DROP COLUMN epoch,
    DROP COLUMN owner,
    DROP CONSTRAINT stream_positions_offsets,
    ALTER COLUMN next_offset SET NOT NULL,
    ALTER COLUMN consumed_offset SET NOT NULL;

DELETE FROM dead_letters d USING ovs_migrate_owner o WHERE d.pipeline <> o.name OR d.reason = 'rejected';
DROP INDEX dead_letters_pending;
ALTER TABLE dead_letters
    DROP CONSTRAINT dead_letters_pkey,
    DROP CONSTRAINT dead_letters_reason,
    ADD CONSTRAINT dead_letters_reason CHECK (reason IN ('decode', 'future', 'late')),
    DROP COLUMN pipeline,
    ADD PRIMARY KEY (topic, partition, "offset");
CREATE INDEX dead_letters_pending ON dead_letters (reason, topic) WHERE replayed_at IS NULL;

DELETE FROM trip_delay_latest t USING ovs_migrate_owner o WHERE t.pipeline <> o.name;
ALTER TABLE trip_delay_latest DROP CONSTRAINT trip_delay_latest_pkey, DROP COLUMN pipeline, ADD PRIMARY KEY (trip_id);

DELETE FROM vehicle_latest v USING ovs_migrate_owner o WHERE v.pipeline <> o.name;
ALTER TABLE vehicle_latest DROP CONSTRAINT vehicle_latest_pkey, DROP COLUMN pipeline, ADD PRIMARY KEY (vehicle_id);

DELETE FROM delay_aggregates a USING ovs_migrate_owner o WHERE a.pipeline <> o.name;
ALTER TABLE delay_aggregates DROP CONSTRAINT delay_aggregates_pkey, DROP COLUMN pipeline,
    ADD PRIMARY KEY (window_start, dimension, dimension_id);
CREATE INDEX delay_aggregates_window_end ON delay_aggregates (window_end);
