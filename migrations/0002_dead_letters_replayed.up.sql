-- ovstream schema, version 2: `ovstream dlq replay` marks the dead letters it
-- re-produced, so a second replay does not send them again. One implicit
-- transaction (see 0001); no BEGIN/COMMIT here.
ALTER TABLE dead_letters
    ADD COLUMN replayed_at timestamptz NULL, -- when dlq replay's records were acknowledged by Kafka; NULL = never replayed
    ADD COLUMN replayed_to text        NULL, -- the topic they were re-produced to
    ADD CONSTRAINT dead_letters_replayed CHECK ((replayed_at IS NULL) = (replayed_to IS NULL));
-- What a replay selects: the rows not replayed yet.
CREATE INDEX dead_letters_pending ON dead_letters (reason, topic) WHERE replayed_at IS NULL;
