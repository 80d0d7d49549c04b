-- Back to version 8: version 8 reads partial windows in format 1 only, so
-- the migration refuses while any in format 2 wait (nothing is lost); those in
-- format 1 stay. Merge them first: one `ovstream run` over every partition
-- of the pipeline, or a split `--drain`, merges every window.
DO $$
DECLARE n bigint;
BEGIN
    SELECT count(*) INTO n FROM delay_partial_windows WHERE get_byte(data, 0) = 130; -- 0x82
    IF n > 0 THEN
        RAISE EXCEPTION '% partial windows in format 2 wait for the merge (delay_partial_windows), which version 8 cannot read', n
            USING HINT = 'merge them first (one ovstream run over every partition of the pipeline, or a split --drain), then migrate down';
    END IF;
END $$;
ALTER TABLE delay_partial_windows RENAME COLUMN data TO rows;
