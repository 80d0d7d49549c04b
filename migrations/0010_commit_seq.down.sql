-- Back to version 9: version 9 keeps no commit sequence (and does not detect
-- a database that lost acknowledged commits) and no lease sessions (a
-- restart with --instance-id waits for the lease). Nothing else is lost.
ALTER TABLE stream_positions DROP COLUMN commit_seq;
ALTER TABLE pipeline_instances DROP COLUMN backend_pid, DROP COLUMN backend_start;
-- pipelines.window_size stays: version 9 ignores it.
