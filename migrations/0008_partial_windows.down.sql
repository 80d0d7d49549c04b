-- Back to version 7: partials are stored per row again. Partial windows not
-- merged yet are not converted back: the migration refuses while any wait,
-- so nothing is lost. Merge them first: one `ovstream run` over every
-- partition of the pipeline, or a split `--drain`, merges every window.
-- The lock first: a split commit in flight while this runs either commits
-- before the count sees it, or waits until the migration is done (before,
-- one that committed while DROP TABLE waited for its lock was dropped).
LOCK TABLE delay_partial_windows IN ACCESS EXCLUSIVE MODE;
DO $$
DECLARE n bigint;
BEGIN
    SELECT count(*) INTO n FROM delay_partial_windows;
    IF n > 0 THEN
        RAISE EXCEPTION 'delay_partial_windows holds % partial windows not merged yet', n
            USING HINT = 'merge them first (one ovstream run over every partition of the pipeline, or a split --drain), then migrate down';
    END IF;
END $$;
DROP TABLE delay_partial_windows;

CREATE TABLE delay_partials (
    pipeline     text             NOT NULL,
    window_start timestamptz      NOT NULL,
    dimension    text             NOT NULL
        CONSTRAINT delay_partials_dimension CHECK (dimension IN ('line', 'station', 'operator', 'network')),
    dimension_id text             NOT NULL,
    topic        text             NOT NULL,
    partition    integer          NOT NULL CONSTRAINT delay_partials_partition CHECK (partition >= 0),
    window_end   timestamptz      NOT NULL,
    operator     text             NULL,
    event_count  bigint           NOT NULL CONSTRAINT delay_partials_event_count CHECK (event_count > 0),
    sum_delay_s  double precision NOT NULL,
    min_delay_s  double precision NOT NULL,
    max_delay_s  double precision NOT NULL,
    delay_values double precision[] NOT NULL,
    delay_counts bigint[]           NOT NULL,
    updated_at   timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, window_start, dimension, dimension_id, topic, partition),
    CONSTRAINT delay_partials_window CHECK (window_end > window_start),
    CONSTRAINT delay_partials_distribution CHECK (
        cardinality(delay_values) > 0 AND cardinality(delay_values) = cardinality(delay_counts)
        AND min_delay_s <= max_delay_s)
);
