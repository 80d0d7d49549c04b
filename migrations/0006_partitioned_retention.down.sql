-- Back to version 5: delay_aggregates a plain table again, with the same
-- columns, constraints, primary key and rows (every partition's); the
-- partition functions and the dead-letter index are dropped.
DROP INDEX IF EXISTS dead_letters_created;
DROP FUNCTION IF EXISTS ovs_create_delay_partition(timestamptz, interval);
DROP FUNCTION IF EXISTS ovs_delay_partitions();
ALTER TABLE delay_aggregates RENAME TO delay_aggregates_v6;
ALTER INDEX delay_aggregates_pkey RENAME TO delay_aggregates_v6_pkey;
CREATE TABLE delay_aggregates (LIKE delay_aggregates_v6 INCLUDING ALL);
INSERT INTO delay_aggregates SELECT * FROM delay_aggregates_v6;
DROP TABLE delay_aggregates_v6; -- and its partitions
