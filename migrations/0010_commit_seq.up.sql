-- ovstream schema, version 10: a commit sequence per partition (issue 22)
-- and the lease session of each instance (issue 24).
-- Each commit that stores a partition's position checks, in its fencing
-- statement, that commit_seq is the one this instance last wrote, and adds
-- one. A database that lost acknowledged commits (an asynchronous replica
-- promoted by a failover, a restore from a backup, a point-in-time recovery)
-- holds a lower commit_seq: the instance re-reads the stored positions and
-- replays from them instead of writing later offsets over the hole
-- (store.BehindError). Rows start at 0: an instance of version 9 still
-- running when this lands does not add to it, and one of version 10 reads it
-- whenever it claims or resyncs. One implicit transaction (see 0001).
ALTER TABLE stream_positions ADD COLUMN commit_seq bigint NOT NULL DEFAULT 0
    CONSTRAINT stream_positions_commit_seq CHECK (commit_seq >= 0);

-- The database session of each instance's lease heartbeat (issue 24, static
-- membership: --instance-id). A claim by a new incarnation of an instance id
-- takes the partitions of an earlier incarnation at once when that session
-- is gone (the process died: its connections closed), instead of waiting for
-- its lease; while it lives, the claim waits like any standby. NULL: an
-- instance of version 9.
ALTER TABLE pipeline_instances ADD COLUMN backend_pid integer NULL,
    ADD COLUMN backend_start timestamptz NULL;

-- pipelines.window_size was never written before this version: every
-- instance must run with the pipeline's window size and topics, and a claim
-- compares them (store.SettingsError). A pipeline with windows gets the size
-- of its newest one, so an instance started with another --window after the
-- upgrade is refused too.
UPDATE pipelines p SET window_size = (
    SELECT d.window_end - d.window_start FROM delay_aggregates d
    WHERE d.pipeline = p.name ORDER BY d.window_start DESC LIMIT 1)
WHERE p.window_size IS NULL;
