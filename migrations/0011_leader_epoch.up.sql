-- ovstream schema, version 11: the leader epoch stored with each partition's
-- offsets (issue 23, KIP-320). A commit writes, in the transaction that
-- writes next_offset, the Kafka leader epoch of the last record consumed
-- below next_offset (an upper bound of its record batch's partition leader
-- epoch that no later leader reaches: consumer/truncation.go says which).
-- At start-up, and whenever a partition's leader changes, the instance asks
-- the leader for the end offset of that epoch (OffsetForLeaderEpoch) and
-- finds a log truncated below the stored offset, as an unclean leader
-- election does, instead of reading on in another log.
-- NULL: unknown, as Kafka's -1 (rows written before this version, a broker
-- whose metadata has no leader epochs): such a row is not validated until a
-- commit writes an epoch.
-- leader_epoch_offset is the next_offset the epoch was written with: an
-- instance of version 10 still running (a standby that claims after the
-- upgrade) moves next_offset on without an epoch, and the epoch of an older
-- offset must not be validated against a newer one (it would look like a
-- truncation): the epoch counts only while leader_epoch_offset = next_offset.
-- One implicit transaction (see 0001).
ALTER TABLE stream_positions ADD COLUMN leader_epoch integer NULL
        CONSTRAINT stream_positions_leader_epoch CHECK (leader_epoch >= 0),
    ADD COLUMN leader_epoch_offset bigint NULL;
