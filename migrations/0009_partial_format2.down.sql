-- Back to version 8: version 8 reads partial windows in format 1 only, so
-- the migration refuses while any in format 2 wait (nothing is lost); those in
-- format 1 stay. Merge them first: one `ovstream run` over every partition
-- of the pipeline, or a split `--drain`, merges every window.
-- The lock first: a split commit in flight while this runs either commits
-- before the count sees it, or waits until the migration is done.
LOCK TABLE delay_partial_windows IN ACCESS EXCLUSIVE MODE;
DO $$
DECLARE n bigint;
BEGIN
    SELECT count(*) INTO n FROM delay_partial_windows WHERE substring(data FROM 1 FOR 1) = '\x82'::bytea;
    IF n > 0 THEN
        RAISE EXCEPTION '% partial windows in format 2 wait for the merge (delay_partial_windows), which version 8 cannot read', n
            USING HINT = 'merge them first (one ovstream run over every partition of the pipeline, or a split --drain), then migrate down';
    END IF;
END $$;
ALTER TABLE delay_partial_windows RENAME COLUMN data TO rows;
