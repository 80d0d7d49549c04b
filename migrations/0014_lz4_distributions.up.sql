-- The exact distributions (delay_aggregates.delay_values and .delay_counts,
-- refused_windows' copies) are TOASTed and
-- compressed once a row passes about 2 kB: a live 5-minute window at 10,000
-- msgs/s has 6,183 rows holding 380,074 distinct delays. PostgreSQL's
-- default, pglz, made its binary COPY take 293-344 ms on the benchmark
-- machine, lz4 139-172 ms (uncompressed 131-150 ms, but 50 % more disk):
-- BENCHMARKS.md, "Live". lz4 is used where the server was built with it
-- (the values default_toast_compression accepts say so, PostgreSQL docs
-- "Runtime Config: Client Defaults" and "TOAST"); elsewhere nothing changes.
--
-- ALTER TABLE ... SET COMPRESSION applies to values written from now on
-- (existing ones stay as they are, readable either way) and does not recurse
-- into the partitions of a partitioned table, so each existing partition is
-- altered too; partitions created later copy it (ovs_create_delay_partition:
-- LIKE delay_aggregates INCLUDING ALL). The tables are locked first (ACCESS
-- EXCLUSIVE, for a catalog update only: no row is rewritten), in the order a
-- split commit writes them, so that a running instance cannot deadlock with
-- the migration and no partition can be created between the list below and
-- the ALTERs. delay_partial_windows.data is left alone: migration 8 stores it
-- uncompressed (STORAGE EXTERNAL).
--
-- Rows that reach delay_aggregates through the commit's fallback path (a
-- replayed batch: COPY into a temporary table, then INSERT ... SELECT) keep
-- the temporary table's compression: the commit gives that table
-- delay_aggregates' (store/commit.go, createTempTables).
DO $$
DECLARE
    t regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        RETURN;
    END IF;
    LOCK TABLE delay_partial_windows, delay_aggregates, refused_windows IN ACCESS EXCLUSIVE MODE;
    FOR t IN SELECT 'delay_aggregates'::regclass UNION ALL
             SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'delay_aggregates'::regclass UNION ALL
             SELECT 'refused_windows'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN delay_values SET COMPRESSION lz4, ALTER COLUMN delay_counts SET COMPRESSION lz4', t);
    END LOOP;
END $$;
