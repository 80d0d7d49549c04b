-- Forgets which dead letters were replayed (a later replay sends them again).
DROP INDEX IF EXISTS dead_letters_pending;
ALTER TABLE dead_letters
    DROP CONSTRAINT IF EXISTS dead_letters_replayed,
    DROP COLUMN IF EXISTS replayed_to,
    DROP COLUMN IF EXISTS replayed_at;
