-- Back to version 14, which has no reason implausible: the migration
-- refuses while such dead letters exist (nothing is lost). Replay them
-- (`ovstream dlq replay --reason implausible`) after raising the bound, or
-- delete them on purpose, then migrate down.
LOCK TABLE dead_letters IN ACCESS EXCLUSIVE MODE;
DO $$
DECLARE n bigint;
BEGIN
    SELECT count(*) INTO n FROM dead_letters WHERE reason = 'implausible';
    IF n > 0 THEN
        RAISE EXCEPTION '% dead letters have reason implausible, which version 14 cannot hold', n
            USING HINT = 'replay them (dlq replay --reason implausible) after raising --max-delay, or delete them, then migrate down';
    END IF;
END $$;
ALTER TABLE dead_letters
    DROP CONSTRAINT dead_letters_reason,
    ADD CONSTRAINT dead_letters_reason CHECK (reason IN ('decode', 'future', 'late', 'rejected'));
ALTER TABLE pipelines DROP COLUMN max_delay;
