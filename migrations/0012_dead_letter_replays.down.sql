-- Back to the version before: the record of which replayed dead letters were counted
-- goes, so a copy of one of them still in the topic, read again from an
-- earlier offset, would count again. Run it only with every copy consumed.
ALTER TABLE dead_letters DROP COLUMN source_topic, DROP COLUMN source_partition, DROP COLUMN source_offset;
DROP TABLE dead_letter_replays;
