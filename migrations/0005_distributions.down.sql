-- Back to version 4: the rollup functions and the stored distributions are dropped.
DROP FUNCTION IF EXISTS ovs_rollup(text, text, timestamptz, timestamptz, interval, double precision[], text, text[], bigint);
DROP FUNCTION IF EXISTS ovs_summary(double precision[], bigint[], double precision[]);
DROP TYPE IF EXISTS ovs_summary;
DROP FUNCTION IF EXISTS ovs_bucket(timestamptz, interval, text, timestamptz);
ALTER TABLE delay_aggregates
    DROP CONSTRAINT IF EXISTS delay_aggregates_distribution,
    DROP COLUMN IF EXISTS delay_values,
    DROP COLUMN IF EXISTS delay_counts;
