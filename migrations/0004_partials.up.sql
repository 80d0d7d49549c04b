-- ovstream schema, version 4: split pipelines (DESIGN.md "Pipelines, instances
-- and partitions", Split windows, Draining a split pipeline). One implicit
-- transaction (see 0001); no BEGIN/COMMIT here.
--
-- An instance that does not own every partition of its pipeline writes, for
-- each window its watermark finalized, one PARTIAL row per row key and source
-- partition. The commit that finds every partition of the pipeline past a
-- window merges that window's partials into delay_aggregates and deletes them.
CREATE TABLE delay_partials (
    pipeline     text             NOT NULL,
    window_start timestamptz      NOT NULL,
    dimension    text             NOT NULL
        CONSTRAINT delay_partials_dimension CHECK (dimension IN ('line', 'station', 'operator', 'network')),
    dimension_id text             NOT NULL,
    topic        text             NOT NULL, -- the source partition of the events (predictions topic)
    partition    integer          NOT NULL CONSTRAINT delay_partials_partition CHECK (partition >= 0),
    window_end   timestamptz      NOT NULL,
    operator     text             NULL,     -- the one operator of the events, NULL when several
    event_count  bigint           NOT NULL CONSTRAINT delay_partials_event_count CHECK (event_count > 0),
    sum_delay_s  double precision NOT NULL, -- exact sum, rounded once
    min_delay_s  double precision NOT NULL,
    max_delay_s  double precision NOT NULL,
    -- The exact distribution: distinct delays ascending, and how many events had each.
    delay_values double precision[] NOT NULL,
    delay_counts bigint[]           NOT NULL,
    updated_at   timestamptz      NOT NULL DEFAULT now(),
    -- Keyed by source partition: writing a partial again (a restart, a
    -- takeover, an ambiguous COMMIT) replaces it, never adds.
    PRIMARY KEY (pipeline, window_start, dimension, dimension_id, topic, partition),
    CONSTRAINT delay_partials_window CHECK (window_end > window_start),
    CONSTRAINT delay_partials_distribution CHECK (
        cardinality(delay_values) > 0 AND cardinality(delay_values) = cardinality(delay_counts)
        AND min_delay_s <= max_delay_s)
);

-- What the merge reads per partition, written by the partition's owner with
-- its positions: idle (caught up, quiet, and none of its events in an open
-- window: it does not hold the merge while its owner's heartbeat is fresh)
-- and drained (its owner's --drain wrote every window: the commit that finds
-- every partition drained merges everything and clears the flags).
ALTER TABLE stream_positions
    ADD COLUMN idle    boolean NOT NULL DEFAULT false,
    ADD COLUMN drained boolean NOT NULL DEFAULT false;

-- The end of the last window merged: no partial of a window ending at or
-- before it may be written any more (its events are late), and an instance
-- of the pipeline starts with its watermark at least there.
ALTER TABLE pipelines
    ADD COLUMN merged_until timestamptz NULL CONSTRAINT pipelines_merged_until CHECK (isfinite(merged_until));
