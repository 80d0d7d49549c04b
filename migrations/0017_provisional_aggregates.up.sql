-- Provisional rows: the statistics of the windows that are still open, as
-- far as the records read so far go (docs/windows.md "Provisional rows").
-- A single-owner instance writes them in the same transaction as its
-- offsets, replacing the rows of each window that changed, and deletes a
-- window's rows in the transaction that writes its final rows to
-- delay_aggregates. The columns of delay_aggregates (LIKE: names, types,
-- NOT NULL, defaults, the distributions' compression), exact distributions
-- included; no CHECK constraints: a row PostgreSQL would refuse is refused,
-- and dead-lettered, when the window is final.
CREATE TABLE delay_aggregates_provisional
    (LIKE delay_aggregates INCLUDING DEFAULTS INCLUDING COMPRESSION);
ALTER TABLE delay_aggregates_provisional ADD PRIMARY KEY (pipeline, window_start, dimension, dimension_id);

-- Which records the provisional rows count: per partition, every record
-- below consumed_offset that is not a dead letter, in a window that is not
-- final. written_at is the commit that wrote the provisional rows last.
CREATE TABLE provisional_positions (
    pipeline        text        NOT NULL,
    topic           text        NOT NULL,
    partition       integer     NOT NULL,
    consumed_offset bigint      NOT NULL,
    written_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, topic, partition)
);

-- Final rows, and the provisional rows of the windows that have none.
CREATE VIEW delay_aggregates_live AS
SELECT pipeline, window_start, window_end, dimension, dimension_id, operator, event_count,
    mean_delay_s, p90_delay_s, min_delay_s, max_delay_s, updated_at, delay_values, delay_counts, true AS final
FROM delay_aggregates
UNION ALL
SELECT p.pipeline, p.window_start, p.window_end, p.dimension, p.dimension_id, p.operator, p.event_count,
    p.mean_delay_s, p.p90_delay_s, p.min_delay_s, p.max_delay_s, p.updated_at, p.delay_values, p.delay_counts, false
FROM delay_aggregates_provisional p
WHERE NOT EXISTS (SELECT 1 FROM delay_aggregates d WHERE d.pipeline = p.pipeline AND d.window_start = p.window_start);
