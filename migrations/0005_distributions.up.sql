-- ovstream schema, version 5: exact distributions and rollups (DESIGN.md
-- "Schema"; issue 12). One implicit transaction (see 0001); no BEGIN/COMMIT.
--
-- 1. Every finalized delay_aggregates row keeps its exact distribution: the
--    distinct delays of its events, ascending, and how many events had each
--    (delay_values[i] occurred delay_counts[i] times; -0 is stored as 0). So
--    any quantile over any set of rows (an hour, a day, a line's week) is
--    exact later. The layout (two arrays in the row) was chosen by measurement:
--    BENCHMARKS.md "Distributions". Rows written before this version have
--    none (NULL): the rollups leave them out.
-- 2. SQL functions that merge stored distributions exactly (README.md
--    "Analysing the numbers"): ovs_bucket, ovs_summary, ovs_rollup.

ALTER TABLE delay_aggregates
    ADD COLUMN delay_values double precision[] NULL,
    ADD COLUMN delay_counts bigint[]           NULL,
    -- Cheap checks only (no scan of the arrays; BENCHMARKS.md
    -- "Distributions" has their cost): both or neither, as many counts as
    -- values, and the ends are min and max.
    ADD CONSTRAINT delay_aggregates_distribution CHECK (
        num_nulls(delay_values, delay_counts) <> 1
        AND cardinality(delay_values) = cardinality(delay_counts)
        AND delay_values[1] = min_delay_s
        AND delay_values[cardinality(delay_values)] = max_delay_s);

-- ovs_bucket returns the start of the bucket that holds ts:
--   bucket NULL:                    origin (one bucket for everything);
--   1 hour, 1 day, 7 days (a week,  date_trunc in time zone tz: calendar
--   from Monday), 1 month, 1 year:  buckets (a day of a DST change in tz
--                                   has 23 or 25 hours);
--   any other interval:             date_bin(bucket, ts, origin): fixed bins
--                                   from origin (no months or years).
-- A window belongs to the bucket of its window_start.
CREATE FUNCTION ovs_bucket(ts timestamptz, bucket interval, tz text DEFAULT 'UTC',
                           origin timestamptz DEFAULT '2000-01-01 00:00:00+00')
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE
    WHEN $2 IS NULL THEN $4
    WHEN date_part('year', $2) = 0 AND date_part('month', $2) = 0 AND date_part('day', $2) = 0
         AND date_part('hour', $2) = 1 AND date_part('minute', $2) = 0 AND date_part('second', $2) = 0
        THEN date_trunc('hour', $1, $3)
    WHEN date_part('year', $2) = 0 AND date_part('month', $2) = 0 AND date_part('day', $2) IN (1, 7)
         AND date_part('hour', $2) = 0 AND date_part('minute', $2) = 0 AND date_part('second', $2) = 0
        THEN date_trunc(CASE WHEN date_part('day', $2) = 1 THEN 'day' ELSE 'week' END, $1, $3)
    WHEN date_part('day', $2) = 0 AND date_part('hour', $2) = 0 AND date_part('minute', $2) = 0
         AND date_part('second', $2) = 0
         AND ((date_part('year', $2) = 0 AND date_part('month', $2) = 1) OR (date_part('year', $2) = 1 AND date_part('month', $2) = 0))
        THEN date_trunc(CASE WHEN date_part('month', $2) = 1 THEN 'month' ELSE 'year' END, $1, $3)
    ELSE date_bin($2, $1, $4)
END
$$;

-- What ovs_summary returns: the statistics of the events a distribution
-- counts, in seconds.
CREATE TYPE ovs_summary AS (
    event_count     bigint,
    mean_delay_s    double precision,
    min_delay_s     double precision,
    max_delay_s     double precision,
    delay_quantiles double precision[]
);

-- ovs_summary merges distributions given as two arrays (values in any order,
-- repeated values add up: e.g. array_agg over unnest(delay_values,
-- delay_counts) of many rows) and returns count, mean, min, max and, for each
-- p of quantiles, the p-quantile by linear interpolation between closest
-- ranks: the numbers count(*), avg, min, max and percentile_cont(p) give over
-- the events themselves (avg bit for bit when the delays are whole seconds;
-- otherwise within rounding, as avg itself depends on the order of its
-- rows). A p outside [0, 1] gives NULL. No events: event_count 0, the rest NULL.
CREATE FUNCTION ovs_summary(delay_values double precision[], delay_counts bigint[],
                            quantiles double precision[] DEFAULT '{0.5,0.9,0.99}')
RETURNS ovs_summary LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
WITH d AS (        -- the merged distribution
    SELECT u.v + 0 AS v, sum(u.c)::bigint AS c       -- + 0 turns -0 into 0
    FROM unnest($1, $2) AS u(v, c) WHERE u.c > 0 GROUP BY 1
), r AS (          -- upto: how many events have a delay <= v
    SELECT v, (sum(c) OVER (ORDER BY v))::bigint AS upto FROM d
), t AS (
    SELECT sum(c)::bigint AS n, sum(v * c) AS s, min(v) AS lo, max(v) AS hi FROM d
)
SELECT ROW(coalesce(t.n, 0), t.s / t.n, t.lo, t.hi, ARRAY(
    -- percentile_cont (PostgreSQL's orderedsetaggs.c): pos = p * (n - 1);
    -- the values at 0-based ranks floor(pos) and ceil(pos); lo + (hi - lo) * (pos - floor(pos)).
    SELECT CASE WHEN NOT (q.p BETWEEN 0 AND 1) THEN NULL
                WHEN k.hi_rank = k.lo_rank THEN k.lo_v
                ELSE k.lo_v + (k.hi_v - k.lo_v) * (k.pos - k.lo_rank) END
    FROM unnest($3) WITH ORDINALITY AS q(p, i)
    CROSS JOIN LATERAL (SELECT q.p * (t.n - 1)::double precision AS pos) AS a
    CROSS JOIN LATERAL (
        SELECT a.pos, floor(a.pos) AS lo_rank, ceil(a.pos) AS hi_rank,
               (SELECT min(r.v) FROM r WHERE r.upto > floor(a.pos)) AS lo_v,
               (SELECT min(r.v) FROM r WHERE r.upto > ceil(a.pos)) AS hi_v) AS k
    ORDER BY q.i))::ovs_summary
FROM t
$$;

-- ovs_rollup: per bucket (ovs_bucket in time zone tz; NULL: the whole range)
-- and dimension id, the summary (ovs_summary) of the stored distributions of
-- one pipeline's rows of one dimension whose window_start is in
-- [since, until), for the ids given (NULL: all), keeping the groups with at
-- least min_events events. Ordered by bucket and id.
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
