-- Back to version 17: ovs_rollup without include_open, and split pipelines
-- without provisional partials (the merged provisional rows they wrote go
-- with them: a binary of version 17 writes none for a split pipeline).
DROP FUNCTION ovs_rollup(text, text, timestamptz, timestamptz, interval, double precision[], text, text[], bigint, boolean);
CREATE FUNCTION ovs_rollup(pipeline text, dimension text, since timestamptz, until timestamptz,
                           bucket interval DEFAULT NULL,
                           quantiles double precision[] DEFAULT '{0.5,0.9,0.99}',
                           tz text DEFAULT 'UTC', ids text[] DEFAULT NULL, min_events bigint DEFAULT 1)
RETURNS TABLE (bucket_start timestamptz, dimension_id text, event_count bigint, mean_delay_s double precision,
               min_delay_s double precision, max_delay_s double precision, delay_quantiles double precision[])
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT g.b, g.id, (g.s).event_count, (g.s).mean_delay_s, (g.s).min_delay_s, (g.s).max_delay_s, (g.s).delay_quantiles
FROM (
    SELECT ovs_bucket(a.window_start, $5, $7, $3) AS b, a.dimension_id AS id,
           ovs_summary(array_agg(u.v), array_agg(u.c), $6) AS s
    FROM delay_aggregates AS a CROSS JOIN LATERAL unnest(a.delay_values, a.delay_counts) AS u(v, c)
    WHERE a.pipeline = $1 AND a.dimension = $2 AND a.window_start >= $3 AND a.window_start < $4
      AND ($8 IS NULL OR a.dimension_id = ANY ($8))
    GROUP BY 1, 2
    OFFSET 0       -- one ovs_summary per group, whatever the outer query reads of it
) AS g
WHERE (g.s).event_count >= $9
ORDER BY 1, 2
$$;
DELETE FROM delay_aggregates_provisional p
WHERE EXISTS (SELECT 1 FROM delay_partial_provisional s WHERE s.pipeline = p.pipeline);
DROP TABLE delay_partial_provisional;
