-- Back to version 9: version 9 keeps no commit sequence (and does not detect
-- a database that lost acknowledged commits). Nothing else is lost.
ALTER TABLE stream_positions DROP COLUMN commit_seq;
