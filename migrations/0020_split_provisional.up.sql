-- Provisional rows of split pipelines (docs/windows.md "Provisional rows").
-- Each instance of a split pipeline writes, per window that is not merged
-- yet and source partition of its own, the partial aggregate of the records
-- below provisional_positions.consumed_offset of that partition (the same
-- encoding as delay_partial_windows, aggregate.PartialWindow): of its open
-- windows, and of the windows it finalized but the pipeline did not merge.
-- In the same transaction, holding the pipeline's row lock as a merge does,
-- it replaces the delay_aggregates_provisional rows of each window it
-- changed with the merge of every instance's provisional partials of that
-- window; the commit that merges a window deletes both. One implicit
-- transaction (see 0001); no BEGIN/COMMIT here.
CREATE TABLE delay_partial_provisional (
    pipeline     text        NOT NULL,
    window_start timestamptz NOT NULL,
    topic        text        NOT NULL, -- the predictions topic
    partition    integer     NOT NULL,
    window_end   timestamptz NOT NULL,
    row_count    integer     NOT NULL,
    data         bytea       NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, window_start, topic, partition)
);
-- As delay_partial_windows: replaced at every provisional write, never
-- worth compressing.
ALTER TABLE delay_partial_provisional ALTER COLUMN data SET STORAGE EXTERNAL;

-- ovs_rollup gains include_open (default false): with it, the rollup reads
-- view delay_aggregates_live (final rows and the provisional rows of the
-- windows not final yet), as `report --include-open` does. Every call
-- written for version 17 means the same: the parameter is the last one and
-- defaults to the final rows alone.
DROP FUNCTION ovs_rollup(text, text, timestamptz, timestamptz, interval, double precision[], text, text[], bigint);
CREATE FUNCTION ovs_rollup(pipeline text, dimension text, since timestamptz, until timestamptz,
                           bucket interval DEFAULT NULL,
                           quantiles double precision[] DEFAULT '{0.5,0.9,0.99}',
                           tz text DEFAULT 'UTC', ids text[] DEFAULT NULL, min_events bigint DEFAULT 1,
                           include_open boolean DEFAULT false)
RETURNS TABLE (bucket_start timestamptz, dimension_id text, event_count bigint, mean_delay_s double precision,
               min_delay_s double precision, max_delay_s double precision, delay_quantiles double precision[])
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT g.b, g.id, (g.s).event_count, (g.s).mean_delay_s, (g.s).min_delay_s, (g.s).max_delay_s, (g.s).delay_quantiles
FROM (
    SELECT ovs_bucket(a.window_start, $5, $7, $3) AS b, a.dimension_id AS id,
           ovs_summary(array_agg(u.v), array_agg(u.c), $6) AS s
    FROM (SELECT d.window_start, d.dimension_id, d.delay_values, d.delay_counts FROM delay_aggregates AS d
          WHERE NOT $10 AND d.pipeline = $1 AND d.dimension = $2 AND d.window_start >= $3 AND d.window_start < $4
          UNION ALL
          SELECT l.window_start, l.dimension_id, l.delay_values, l.delay_counts FROM delay_aggregates_live AS l
          WHERE $10 AND l.pipeline = $1 AND l.dimension = $2 AND l.window_start >= $3 AND l.window_start < $4) AS a
    CROSS JOIN LATERAL unnest(a.delay_values, a.delay_counts) AS u(v, c)
    WHERE $8 IS NULL OR a.dimension_id = ANY ($8)
    GROUP BY 1, 2
    OFFSET 0       -- one ovs_summary per group, whatever the outer query reads of it
) AS g
WHERE (g.s).event_count >= $9
ORDER BY 1, 2
$$;
