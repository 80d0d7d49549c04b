-- On-time performance and headways of stop visits (docs/analysing.md,
-- "On-time performance and headways"): the SQL functions ovs_on_time and
-- ovs_headways, which `ovstream report --metric on-time|headway` calls, and
-- stop_visits.arrival_predicted: whether the visit's last prediction gave an
-- arrival_time (true) or its event time stands in for it (false); NULL for
-- rows written before this migration (unknown: headways leave them out).

ALTER TABLE stop_visits ADD COLUMN arrival_predicted boolean NULL;

-- ovs_visit_dimension_id returns the id of a visit in dimension dim: its
-- line, its stop_id (station), its operator, or 'all' (network); NULL for
-- any other dimension.
CREATE FUNCTION ovs_visit_dimension_id(dim text, line text, stop_id text, operator text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE dim WHEN 'line' THEN line WHEN 'station' THEN stop_id WHEN 'operator' THEN operator WHEN 'network' THEN 'all' END
$$;

-- ovs_visit_bucket returns the bucket start of a visit: with by_service_day
-- the local midnight in tz of its service day (start_date), else
-- ovs_bucket(arrival_time, bucket, tz, origin).
CREATE FUNCTION ovs_visit_bucket(arrival_time timestamptz, start_date date, bucket interval, tz text,
                                 origin timestamptz, by_service_day boolean)
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN by_service_day THEN start_date::timestamp AT TIME ZONE tz
            ELSE ovs_bucket(arrival_time, bucket, tz, origin) END
$$;

-- ovs_visit_realized tells whether a visit counts under realized_within_s:
-- with NULL every visit does; else only a visit whose last prediction was
-- made at most realized_within_s seconds before the arrival it predicts (or
-- after it): the vehicle was at the stop, so its delay is the realized one.
-- The other visits' delays are still predictions, provisional until the
-- vehicle comes.
CREATE FUNCTION ovs_visit_realized(arrival_time timestamptz, last_event_time timestamptz, realized_within_s double precision)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT realized_within_s IS NULL OR arrival_time - last_event_time <= realized_within_s * interval '1 second'
$$;

-- ovs_check_visit_query raises an error (SQLSTATE 22023) for a dimension
-- ovs_on_time and ovs_headways do not know, a range that is NULL or empty,
-- or an argument of names that is not a finite number >= 0 (vals[i] is
-- names[i]'s value).
CREATE FUNCTION ovs_check_visit_query(dimension text, since timestamptz, until timestamptz,
                                      vals double precision[], names text[])
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF dimension IS NULL OR dimension NOT IN ('line', 'station', 'operator', 'network') THEN
        RAISE EXCEPTION 'dimension %: want line, station, operator or network', coalesce(dimension, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF since IS NULL OR until IS NULL OR NOT since < until THEN
        RAISE EXCEPTION 'time range [%, %): want since < until', coalesce(since::text, 'NULL'), coalesce(until::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. coalesce(cardinality(names), 0) LOOP
        IF vals[i] IS NULL OR vals[i] = 'NaN' OR vals[i] = 'Infinity' OR vals[i] < 0 THEN
            RAISE EXCEPTION '%: %, want a finite number >= 0', names[i], coalesce(vals[i]::text, 'NULL')
                USING ERRCODE = '22023';
        END IF;
    END LOOP;
END
$$;

-- ovs_on_time: per bucket and dimension id, the stop visits of pipeline
-- whose arrival_time is in [since, until) (ids: NULL for all), counted
-- early (delay_s < -early_s), late (delay_s > late_s) and on time (the
-- rest: both bounds inclusive), and the share on time. Ordered by bucket
-- and id.
CREATE FUNCTION ovs_on_time(pipeline text, dimension text, since timestamptz, until timestamptz,
                            bucket interval DEFAULT NULL, tz text DEFAULT 'UTC',
                            early_s double precision DEFAULT 60, late_s double precision DEFAULT 300,
                            ids text[] DEFAULT NULL, by_service_day boolean DEFAULT false,
                            realized_within_s double precision DEFAULT NULL)
RETURNS TABLE (bucket_start timestamptz, dimension_id text, visits bigint, early bigint, on_time bigint,
               late bigint, on_time_share double precision)
LANGUAGE sql STABLE AS $$
SELECT ovs_check_visit_query(dimension, since, until, ARRAY[early_s, late_s, coalesce(realized_within_s, 0)],
                             ARRAY['early_s', 'late_s', 'realized_within_s']);
WITH v AS (
    SELECT ovs_visit_bucket(s.arrival_time, s.start_date, bucket, tz, since, by_service_day) AS b,
           ovs_visit_dimension_id(dimension, s.line, s.stop_id, s.operator) AS id, s.delay_s
    FROM stop_visits AS s
    WHERE s.pipeline = ovs_on_time.pipeline AND s.arrival_time >= since AND s.arrival_time < until
      AND ovs_visit_realized(s.arrival_time, s.last_event_time, realized_within_s)
)
SELECT v.b, v.id, count(*), count(*) FILTER (WHERE v.delay_s < -early_s),
       count(*) FILTER (WHERE v.delay_s >= -early_s AND v.delay_s <= late_s),
       count(*) FILTER (WHERE v.delay_s > late_s),
       (count(*) FILTER (WHERE v.delay_s >= -early_s AND v.delay_s <= late_s))::float8 / count(*)::float8
FROM v
WHERE ids IS NULL OR v.id = ANY (ids)
GROUP BY 1, 2
ORDER BY 1, 2
$$;

-- ovs_headways: per bucket and dimension id, the gaps between consecutive
-- visits of a line at a stop (stop_id) on one service day (start_date),
-- among the visits whose arrival_time is a predicted arrival
-- (arrival_predicted): observed gaps in arrival_time order, scheduled gaps
-- in scheduled-time order (arrival_time - delay_s); ties by trip_id, then
-- stop_key (bytewise). A gap belongs to the later visit of its pair, whose
-- arrival_time is in [since, until) and names the bucket and the id; the
-- first visit of a line at a stop on a service day has none, and no gap
-- spans two service days. Per group: the observed gaps, their mean and
-- the average wait sum(h^2) / (2 sum(h)) (awt_s); the same of the
-- scheduled gaps (swt_s); excess_wait_s = awt_s - swt_s; the gaps
-- assessed (a visit with both gaps) and those within the scheduled gap
-- times (1 + wait_tolerance) (h <= s * (1 + wait_tolerance)), and their
-- share. Seconds; NULL where nothing is counted or a sum is 0. Ordered by
-- bucket and id.
CREATE FUNCTION ovs_headways(pipeline text, dimension text, since timestamptz, until timestamptz,
                             bucket interval DEFAULT NULL, tz text DEFAULT 'UTC', ids text[] DEFAULT NULL,
                             by_service_day boolean DEFAULT false, wait_tolerance double precision DEFAULT 0.25,
                             realized_within_s double precision DEFAULT NULL)
RETURNS TABLE (bucket_start timestamptz, dimension_id text, gaps bigint, mean_headway_s double precision,
               awt_s double precision, scheduled_gaps bigint, scheduled_mean_headway_s double precision,
               swt_s double precision, excess_wait_s double precision, assessed bigint, within_tolerance bigint,
               wait_assessment double precision)
LANGUAGE sql STABLE AS $$
SELECT ovs_check_visit_query(dimension, since, until, ARRAY[wait_tolerance, coalesce(realized_within_s, 0)],
                             ARRAY['wait_tolerance', 'realized_within_s']);
WITH days AS (
    SELECT DISTINCT s.start_date FROM stop_visits AS s
    WHERE s.pipeline = ovs_headways.pipeline AND s.arrival_predicted
      AND s.arrival_time >= since AND s.arrival_time < until
      AND ovs_visit_realized(s.arrival_time, s.last_event_time, realized_within_s)
),
v AS (
    SELECT s.line, s.stop_id, s.operator, s.start_date, s.trip_id, s.stop_key, s.arrival_time,
           s.arrival_time - s.delay_s * interval '1 second' AS scheduled
    FROM stop_visits AS s JOIN days USING (start_date)
    WHERE s.pipeline = ovs_headways.pipeline AND s.arrival_predicted
      AND ovs_visit_realized(s.arrival_time, s.last_event_time, realized_within_s)
),
g AS (
    SELECT v.*,
           extract(epoch FROM v.arrival_time - lag(v.arrival_time) OVER (PARTITION BY v.line, v.stop_id, v.start_date
               ORDER BY v.arrival_time, v.trip_id COLLATE "C", v.stop_key COLLATE "C")) AS h,
           extract(epoch FROM v.scheduled - lag(v.scheduled) OVER (PARTITION BY v.line, v.stop_id, v.start_date
               ORDER BY v.scheduled, v.trip_id COLLATE "C", v.stop_key COLLATE "C")) AS sh
    FROM v
),
x AS (
    SELECT ovs_visit_bucket(g.arrival_time, g.start_date, bucket, tz, since, by_service_day) AS b,
           ovs_visit_dimension_id(dimension, g.line, g.stop_id, g.operator) AS id, g.h, g.sh
    FROM g
    WHERE g.arrival_time >= since AND g.arrival_time < until AND (g.h IS NOT NULL OR g.sh IS NOT NULL)
),
t AS (
    SELECT x.b, x.id, count(x.h) AS n, sum(x.h) AS sum_h, sum(x.h * x.h) AS sum_h2,
           count(x.sh) AS sn, sum(x.sh) AS sum_s, sum(x.sh * x.sh) AS sum_s2,
           count(*) FILTER (WHERE x.h IS NOT NULL AND x.sh IS NOT NULL) AS assessed,
           count(*) FILTER (WHERE x.h::float8 <= x.sh::float8 * (1 + wait_tolerance)) AS within
    FROM x
    WHERE ids IS NULL OR x.id = ANY (ids)
    GROUP BY 1, 2
)
SELECT t.b, t.id, t.n, t.sum_h::float8 / nullif(t.n, 0)::float8, t.sum_h2::float8 / nullif(2 * t.sum_h, 0)::float8,
       t.sn, t.sum_s::float8 / nullif(t.sn, 0)::float8, t.sum_s2::float8 / nullif(2 * t.sum_s, 0)::float8,
       t.sum_h2::float8 / nullif(2 * t.sum_h, 0)::float8 - t.sum_s2::float8 / nullif(2 * t.sum_s, 0)::float8,
       t.assessed, t.within, t.within::float8 / nullif(t.assessed, 0)::float8
FROM t
ORDER BY 1, 2
$$;
