-- The plausible delay: a pipeline setting every instance shares (like
-- window_size), recorded by the first claim that names it. A prediction
-- whose |delay_s| is larger is a dead letter with its own reason,
-- implausible (a service-day error of the feed, not a delay).
ALTER TABLE pipelines
    ADD COLUMN max_delay interval NULL
        CONSTRAINT pipelines_max_delay CHECK (max_delay > interval '0' AND max_delay <= interval '1 day');
ALTER TABLE dead_letters
    DROP CONSTRAINT dead_letters_reason,
    ADD CONSTRAINT dead_letters_reason CHECK (reason IN ('decode', 'future', 'late', 'rejected', 'implausible'));
