-- Back to version 3: partials not yet merged are dropped (their events are
-- re-read from Kafka only if the stored offsets allow; merge them first by
-- running one instance over every partition, or a split --drain).
DROP TABLE IF EXISTS delay_partials;
ALTER TABLE stream_positions DROP COLUMN IF EXISTS idle, DROP COLUMN IF EXISTS drained;
ALTER TABLE pipelines DROP COLUMN IF EXISTS merged_until;
