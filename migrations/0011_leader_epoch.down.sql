-- Back to version 10: version 10 stores no leader epoch and does not detect
-- a log truncated below the stored offsets (an unclean leader election).
-- Nothing else is lost.
ALTER TABLE stream_positions DROP COLUMN leader_epoch, DROP COLUMN leader_epoch_offset;
