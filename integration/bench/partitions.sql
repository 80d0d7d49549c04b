-- Partitioned delay_aggregates (migration 6) against a plain table with the
-- same columns, constraints and rows: BENCHMARKS.md "Partitioned
-- delay_aggregates". On a scratch database at schema 6:
--
--   ovstream migrate --database-url URL up
--   psql -X -d URL -v days=30 -f integration/bench/partitions.sql 2>&1 | tee partitions.log
--
-- Each measured statement runs 7 times, timed on the server
-- (clock_timestamp) and rolled back (a subtransaction), so every run sees the
-- same tables; the median, min and max are printed. Rows:
-- 288 windows a day x 70 ids (20 lines, 45 stations, 4 operators, the
-- network) = 20,160 a day, of pipeline bench, 4 distinct delays each.
\set ON_ERROR_STOP on
\if :{?days}
\else
\set days 30
\endif
SET client_min_messages = warning;
DROP TABLE IF EXISTS plain_aggregates, bench_batch;
TRUNCATE delay_aggregates;
CREATE TABLE plain_aggregates (LIKE delay_aggregates INCLUDING ALL);

CREATE TEMP VIEW bench_ids AS
SELECT 'line' AS dim, 'L' || g AS id FROM generate_series(1, 20) AS g
UNION ALL SELECT 'station', 'S' || g FROM generate_series(1, 45) AS g
UNION ALL SELECT 'operator', 'O' || g FROM generate_series(1, 4) AS g
UNION ALL SELECT 'network', 'all';

INSERT INTO plain_aggregates (pipeline, window_start, window_end, dimension, dimension_id, operator, event_count,
    mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, delay_values, delay_counts)
SELECT 'bench', ws, ws + interval '5 minutes', i.dim, i.id, 'op', 4, 40, 81, -10, 90,
       ARRAY[-10, 20 + length(i.id), 60, 90]::float8[], '{1,1,1,1}'::bigint[]
FROM generate_series('2026-01-01 00:00:00+00'::timestamptz,
                     '2026-01-01 00:00:00+00'::timestamptz + :days * interval '1 day' - interval '5 minutes',
                     interval '5 minutes') AS ws
CROSS JOIN bench_ids AS i;
SELECT count(*) AS partitions_made FROM generate_series(0, :days) AS d
    CROSS JOIN LATERAL ovs_create_delay_partition('2026-01-01 00:00:00+00'::timestamptz + d * interval '1 day') AS p;
INSERT INTO delay_aggregates SELECT * FROM plain_aggregates;
-- A commit's windows: one hour of the newest day (12 windows x 70 ids = 840
-- rows), not yet in the table.
CREATE TABLE bench_batch AS SELECT * FROM plain_aggregates WHERE false;
INSERT INTO bench_batch SELECT window_start + interval '1 day', window_end + interval '1 day', dimension,
    dimension_id, operator, event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, updated_at, pipeline,
    delay_values, delay_counts
FROM plain_aggregates WHERE window_start >= '2026-01-01 00:00:00+00'::timestamptz + (:days - 1) * interval '1 day'
    AND window_start < '2026-01-01 00:00:00+00'::timestamptz + (:days - 1) * interval '1 day' + interval '1 hour';
VACUUM ANALYZE plain_aggregates;
VACUUM ANALYZE delay_aggregates;
VACUUM ANALYZE bench_batch;
SELECT (SELECT count(*) FROM plain_aggregates) AS rows_each,
       pg_size_pretty(pg_total_relation_size('plain_aggregates')) AS plain_size,
       pg_size_pretty((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('delay_aggregates'))) AS partitioned_size,
       (SELECT count(*) FROM bench_batch) AS batch_rows;

-- bench runs sql n times, each in a subtransaction it rolls back, and
-- returns the median, min and max in milliseconds.
CREATE FUNCTION pg_temp.bench(what text, sql text, n int DEFAULT 7)
RETURNS TABLE (measured text, median_ms numeric, min_ms numeric, max_ms numeric)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz;
    ms float8[] := '{}';
BEGIN
    FOR i IN 1..n LOOP
        BEGIN
            t0 := clock_timestamp();
            EXECUTE sql;
            ms := ms || extract(epoch FROM clock_timestamp() - t0)::float8 * 1000;
            RAISE EXCEPTION USING ERRCODE = 'P0099';
        EXCEPTION WHEN SQLSTATE 'P0099' THEN NULL; -- rolled back; ms is kept
        END;
    END LOOP;
    RETURN QUERY SELECT what, (percentile_cont(0.5) WITHIN GROUP (ORDER BY x))::numeric(10, 2),
        min(x)::numeric(10, 2), max(x)::numeric(10, 2) FROM unnest(ms) AS x;
END
$$;

\set rollup 'SELECT count(*) FROM (SELECT date_trunc($$hour$$, a.window_start), a.dimension_id, ovs_summary(array_agg(u.v), array_agg(u.c)) FROM %s AS a CROSS JOIN LATERAL unnest(a.delay_values, a.delay_counts) AS u(v, c) WHERE a.pipeline = $$bench$$ AND a.dimension = $$line$$ AND a.window_start >= $$2026-01-10 00:00:00+00$$ AND a.window_start < $$2026-01-11 00:00:00+00$$ GROUP BY 1, 2) AS s'
\set upsert 'INSERT INTO %s SELECT * FROM bench_batch ON CONFLICT (pipeline, window_start, dimension, dimension_id) DO UPDATE SET event_count = EXCLUDED.event_count, delay_values = EXCLUDED.delay_values, updated_at = now()'
\set seed 'SELECT max(window_end) FROM %1$s WHERE pipeline = $$bench$$ AND window_start = (SELECT max(window_start) FROM %1$s WHERE pipeline = $$bench$$)'
SELECT b.* FROM (VALUES
    ('(a) a commit of new windows (840 rows)', 'INSERT INTO %s SELECT * FROM bench_batch'),
    ('(c) a day of lines in 1 h buckets (ovs_rollup)', :'rollup'),
    ('(d) the start-up seed (SeedWatermark)', :'seed'),
    ('(e) retention of the oldest day', 'DELETE FROM %s WHERE window_start < $$2026-01-02 00:00:00+00$$')
) AS m(what, sql)
CROSS JOIN (VALUES ('plain_aggregates'), ('delay_aggregates')) AS t(tbl)
CROSS JOIN LATERAL pg_temp.bench(m.what || ': ' || t.tbl, format(m.sql, t.tbl)) AS b;
-- (b) the same windows again: the upsert path (ON CONFLICT DO UPDATE).
INSERT INTO plain_aggregates SELECT * FROM bench_batch;
INSERT INTO delay_aggregates SELECT * FROM bench_batch;
SELECT b.* FROM (VALUES ('plain_aggregates'), ('delay_aggregates')) AS t(tbl)
CROSS JOIN LATERAL pg_temp.bench('(b) the same 840 rows again, upserted: ' || t.tbl, format(:'upsert', t.tbl)) AS b;
SELECT * FROM pg_temp.bench('(e) retention of the oldest day: DROP TABLE of its partition', 'DROP TABLE delay_aggregates_20260101');
SELECT * FROM pg_temp.bench('(f) a new partition (ovs_create_delay_partition: LIKE + ATTACH)',
    'SELECT ovs_create_delay_partition($$2027-01-01 00:00:00+00$$)');
SELECT * FROM pg_temp.bench('(g) migration 6 moving every row into the partitions', 'TRUNCATE delay_aggregates; '
    || 'INSERT INTO delay_aggregates SELECT * FROM plain_aggregates', 3);
DROP TABLE plain_aggregates, bench_batch;
TRUNCATE delay_aggregates;
