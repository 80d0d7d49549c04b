-- Prediction history and accuracy by horizon (docs/analysing.md "Prediction
-- accuracy by horizon"). Every stop visit keeps each of its predictions:
-- prediction_times[i] is the event time of one, prediction_delays[i] its
-- delay_s, sorted by (time, delay), so the arrays are the same whatever the
-- order in which commits, partitions and split instances bring them. They
-- are written by the upsert of every commit, in the transaction that stores
-- the offsets, like the rest of the row (store/visits.go). Rows upserted
-- before this migration hold fewer predictions in the arrays than in
-- `predictions`; ovs_accuracy leaves them out.
ALTER TABLE stop_visits
    ADD COLUMN prediction_times  timestamptz[]      NOT NULL DEFAULT '{}',
    ADD COLUMN prediction_delays double precision[] NOT NULL DEFAULT '{}';

-- ovs_accuracy(pipeline, dimension, since, until, horizon_bounds_s,
-- early_limits_s, late_limits_s, quantiles, ids, realized_within_s): per
-- dimension id and horizon bucket, the accuracy of the predictions of the
-- visits of one pipeline whose realized arrival (stop_visits.arrival_time,
-- the last prediction's) is in [since, until), each prediction (event time
-- and delay) once, whatever records carried it, the last prediction itself
-- excepted (it is the reference). A visit has arrived, so its last
-- prediction stands for the arrival, when that prediction was made at most
-- realized_within_s before the arrival it predicts (or after it); the
-- others (a trip the feed stopped predicting early, one still under way)
-- are left out. For a prediction made at event time t with delay
-- d: horizon = arrival_time - t (seconds), error = delay_s - d (seconds:
-- the realized arrival minus the predicted one, positive when the vehicle
-- came later than predicted). Bucket i holds the horizons in
-- [horizon_bounds_s[i], horizon_bounds_s[i+1]); a prediction is accurate
-- when early_limits_s[i] <= error <= late_limits_s[i]. The defaults are the
-- ETA Accuracy Benchmark's buckets and bands (0-3, 3-6, 6-10, 10-15 minutes;
-- -30/+90, -60/+150, -60/+210, -90/+270 s). Only visits whose history is
-- complete (cardinality = predictions) count. Ordered by id and bucket;
-- buckets without predictions have no row.
CREATE FUNCTION ovs_accuracy(pipeline text, dimension text, since timestamptz, until timestamptz,
                             horizon_bounds_s double precision[] DEFAULT '{0,180,360,600,900}',
                             early_limits_s double precision[] DEFAULT '{-30,-60,-60,-90}',
                             late_limits_s double precision[] DEFAULT '{90,150,210,270}',
                             quantiles double precision[] DEFAULT '{0.5,0.9}',
                             ids text[] DEFAULT NULL,
                             realized_within_s double precision DEFAULT 120)
RETURNS TABLE (dimension_id text, bucket integer, horizon_from_s double precision, horizon_to_s double precision,
               early_s double precision, late_s double precision, predictions bigint, accurate bigint,
               accuracy double precision, mean_error_s double precision, error_quantiles double precision[])
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH b AS (
    SELECT i AS bucket, $5[i] AS lo, $5[i + 1] AS hi, $6[i] AS early, $7[i] AS late
    FROM generate_series(1, cardinality($5) - 1) AS i
), p AS (
    SELECT CASE $2 WHEN 'line' THEN v.line WHEN 'station' THEN v.stop_id WHEN 'operator' THEN v.operator
                   WHEN 'network' THEN 'all' END AS id,
           extract(epoch FROM v.arrival_time - h.t)::double precision AS horizon, v.delay_s - h.d AS err
    FROM stop_visits AS v
    -- each prediction once: a record produced twice is the same prediction
    CROSS JOIN LATERAL (SELECT DISTINCT r.t, r.d FROM unnest(v.prediction_times, v.prediction_delays) AS r(t, d)) AS h
    WHERE v.pipeline = $1 AND v.arrival_time >= $3 AND v.arrival_time < $4
      -- the service day is at most two days before the arrival's UTC date
      -- and one after (trips past midnight, time zones): lets the index of
      -- (pipeline, start_date) narrow the scan
      AND v.start_date >= ($3 AT TIME ZONE 'UTC')::date - 2 AND v.start_date <= ($4 AT TIME ZONE 'UTC')::date + 1
      AND cardinality(v.prediction_times) = v.predictions AND NOT (h.t = v.last_event_time AND h.d = v.delay_s)
      AND extract(epoch FROM v.arrival_time - v.last_event_time) <= $10
)
SELECT p.id, b.bucket, b.lo, b.hi, b.early, b.late, count(*),
       count(*) FILTER (WHERE p.err >= b.early AND p.err <= b.late),
       (count(*) FILTER (WHERE p.err >= b.early AND p.err <= b.late))::double precision / count(*),
       avg(p.err), percentile_cont($8) WITHIN GROUP (ORDER BY p.err)
FROM p JOIN b ON p.horizon >= b.lo AND p.horizon < b.hi
WHERE $9 IS NULL OR p.id = ANY ($9)
GROUP BY p.id, b.bucket, b.lo, b.hi, b.early, b.late
ORDER BY 1, 2
$$;
