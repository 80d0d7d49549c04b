-- Back to version 10: instances no longer report how old their oldest
-- unwritten closable window is. Nothing else is lost.
ALTER TABLE pipeline_instances DROP COLUMN closable_since;
