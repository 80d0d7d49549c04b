-- A replayed dead letter counts at most once (docs/runbook.md, "Growing
-- dead-letter table"). `dlq replay` re-produces a dead letter with the header
-- ovstream-dlq-source = its source record (topic/partition/offset); a crash
-- between Kafka's acknowledgement and the database commit sends it again, so
-- the topic may hold several copies. The commit that counts a copy (merges
-- it into its window's stored rows) inserts the source here in the same
-- transaction, and counts only the copies whose insert did not conflict.
CREATE TABLE dead_letter_replays (
    pipeline         text        NOT NULL,
    source_topic     text        NOT NULL,
    source_partition integer     NOT NULL,
    source_offset    bigint      NOT NULL,
    -- the copy that was counted
    topic            text        NOT NULL,
    partition        integer     NOT NULL,
    "offset"         bigint      NOT NULL,
    window_start     timestamptz NOT NULL,
    counted_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, source_topic, source_partition, source_offset)
);

-- A copy that is dead-lettered again keeps the source it was replayed from,
-- so a later replay of it sends the same ovstream-dlq-source (NULL: the dead
-- letter is its own source).
ALTER TABLE dead_letters ADD COLUMN source_topic text, ADD COLUMN source_partition integer, ADD COLUMN source_offset bigint;
