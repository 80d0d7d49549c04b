-- Back to the server's default_toast_compression for values written from now
-- on; values written as lz4 stay readable (the server decompresses either).
DO $$
DECLARE
    t regclass;
BEGIN
    LOCK TABLE delay_partial_windows, delay_aggregates, refused_windows IN ACCESS EXCLUSIVE MODE;
    FOR t IN SELECT 'delay_aggregates'::regclass UNION ALL
             SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'delay_aggregates'::regclass UNION ALL
             SELECT 'refused_windows'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN delay_values SET COMPRESSION DEFAULT, ALTER COLUMN delay_counts SET COMPRESSION DEFAULT', t);
    END LOOP;
END $$;
