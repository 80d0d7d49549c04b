-- ovstream schema, version 6: delay_aggregates partitioned by time, for
-- retention (issue 12 part 3; README "Retention"). One implicit transaction
-- (see 0001); no BEGIN/COMMIT here.
--
-- 1. delay_aggregates becomes a declaratively partitioned table, RANGE on
--    window_start, ONE PARTITION PER DAY IN UTC, named delay_aggregates_YYYYMMDD
--    (delay_aggregates_20160518 holds the windows starting in
--    [2016-05-18 00:00Z, 2016-05-19 00:00Z)). Why a day: retention is given in
--    days (--retention 90d), so a day is the finest grain an operator asks
--    for; at the measured 14 GB a year per city a day is ~40 MB, so 90 days
--    are 90 partitions; an hour would make 2,160, and planning a query that
--    cannot prune grows with them (the start-up seed: 12-32 ms at 31
--    partitions, 254-375 ms at 396); a rollup over a day or a week reads 1 or
--    7 partitions (pruned on window_start); a backfill of old data creates
--    only the days it has events for. BENCHMARKS.md "Partitioned
--    delay_aggregates" has the cost: writes as fast as a plain table, a day
--    dropped in 1.5 ms where deleting its rows took 197 ms.
--    The columns (in the same order), defaults, every CHECK constraint (also
--    ones an operator added) and the primary key (pipeline, window_start,
--    dimension, dimension_id: it holds the partition key, as PostgreSQL
--    requires) are those of version 5 (LIKE ... INCLUDING ALL); the rows are
--    moved, unchanged. This rewrites the table under an ACCESS EXCLUSIVE
--    lock: stop every `run` first.
-- 2. The partitions a commit needs are created ahead of its transaction by
--    the commit path (store/partitions.go), with ovs_create_delay_partition,
--    never inside it: it ATTACHes a new empty table, which takes only SHARE
--    UPDATE EXCLUSIVE on delay_aggregates (PostgreSQL 15 docs, ALTER TABLE
--    ATTACH PARTITION), so commits in flight (ROW EXCLUSIVE) and readers go
--    on; CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE.
-- 3. `run --retention` drops whole old partitions (store/retention.go);
--    `--dead-letter-retention` deletes old dead letters by created_at, in
--    batches, through the index below.

ALTER TABLE delay_aggregates RENAME TO delay_aggregates_v5;
ALTER INDEX delay_aggregates_pkey RENAME TO delay_aggregates_v5_pkey;
CREATE TABLE delay_aggregates (LIKE delay_aggregates_v5 INCLUDING ALL) PARTITION BY RANGE (window_start);

-- ovs_delay_partitions lists the partitions of delay_aggregates with the
-- range each holds: window_start in [range_start, range_end). A DEFAULT
-- partition (none is made by ovstream) is left out; MINVALUE and MAXVALUE
-- bounds read as -infinity and infinity.
CREATE FUNCTION ovs_delay_partitions()
RETURNS TABLE (partition_name regclass, range_start timestamptz, range_end timestamptz)
LANGUAGE sql STABLE AS $$
SELECT c.oid::regclass,
       CASE WHEN b.m[1] = 'MINVALUE' THEN '-infinity' ELSE btrim(b.m[1], '''') END::timestamptz,
       CASE WHEN b.m[2] = 'MAXVALUE' THEN 'infinity' ELSE btrim(b.m[2], '''') END::timestamptz
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
CROSS JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
    '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m) AS b
WHERE i.inhparent = to_regclass('delay_aggregates') AND b.m IS NOT NULL
ORDER BY 2
$$;

-- ovs_create_delay_partition returns the partition of delay_aggregates that
-- holds window_start ts, creating it first when there is none: the day of ts
-- in UTC, named delay_aggregates_YYYYMMDD. Concurrent callers (two instances
-- that need the same day) are serialized by a transaction-level advisory
-- lock keyed by delay_aggregates' oid, and the second finds the partition the
-- first made. Locks: the advisory lock, ACCESS SHARE then SHARE UPDATE
-- EXCLUSIVE on delay_aggregates (ATTACH PARTITION), ACCESS EXCLUSIVE on the
-- new, empty table only; never one that waits for a commit in flight. Call
-- it alone, in a short transaction of its own (a statement outside any
-- BEGIN is one); max_lock_wait, when given, sets lock_timeout for the rest of
-- that transaction, so a lock it cannot get fails it (SQLSTATE 55P03)
-- instead of queueing every later lock request on delay_aggregates behind it.
CREATE FUNCTION ovs_create_delay_partition(ts timestamptz, max_lock_wait interval DEFAULT NULL)
RETURNS TABLE (partition_name regclass, range_start timestamptz, range_end timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    lo   timestamptz := date_trunc('day', ts, 'UTC');
    hi   timestamptz := date_trunc('day', ts, 'UTC') + interval '1 day';
    name text := 'delay_aggregates_' || to_char(date_trunc('day', ts, 'UTC') AT TIME ZONE 'UTC', 'YYYYMMDD')
                 || CASE WHEN ts < '0001-01-01 00:00:00+00' THEN '_bc' ELSE '' END;
BEGIN
    IF max_lock_wait IS NOT NULL THEN
        PERFORM set_config('lock_timeout', (ceil(extract(epoch FROM max_lock_wait) * 1000))::bigint::text, true);
    END IF;
    PERFORM pg_advisory_xact_lock(to_regclass('delay_aggregates')::oid::bigint);
    RETURN QUERY SELECT p.partition_name, p.range_start, p.range_end FROM ovs_delay_partitions() AS p
        WHERE p.range_start <= ts AND ts < p.range_end;
    IF FOUND THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE delay_aggregates INCLUDING ALL)', name);
    EXECUTE format('ALTER TABLE delay_aggregates ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
    RETURN QUERY SELECT to_regclass(quote_ident(name)), lo, hi;
END
$$;

-- The partitions the existing rows need, then the rows, unchanged.
SELECT count(*) FROM (SELECT DISTINCT date_trunc('day', window_start, 'UTC') AS d FROM delay_aggregates_v5) AS days
    CROSS JOIN LATERAL ovs_create_delay_partition(days.d) AS p;
INSERT INTO delay_aggregates SELECT * FROM delay_aggregates_v5;
DROP TABLE delay_aggregates_v5;

-- --dead-letter-retention deletes a pipeline's oldest dead letters first.
CREATE INDEX dead_letters_created ON dead_letters (pipeline, created_at);
