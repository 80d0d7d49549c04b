-- ovstream schema, version 7: the names of lines and stations (issue 15). One
-- implicit transaction (see 0001); no BEGIN/COMMIT here. Version 6 may be
-- missing from a binary built before it was merged: golang-migrate applies
-- the versions it has in order, gaps included.
--
-- Records may carry line_name, line_short_name and stop_name (README "Data
-- contract"; `produce --gtfs-static` writes them from routes.txt and
-- stops.txt). Each commit writes, in its one transaction, the names that
-- changed since the instance's last commit: per pipeline, one row per line
-- (name = line_name, else line_short_name; short_name = line_short_name)
-- and per station (name = stop_name). Operators and the network have none.
-- A name is replaced only by one of a newer record: observed_at is the
-- event_time of the newest record the writer saw with this name, and the
-- upsert replaces a row only when (observed_at, name, short_name) of the new
-- one is greater (COLLATE "C"), so a replay of older records never brings
-- an old name back. updated_at is when the name last changed (UTC).
CREATE TABLE names (
    pipeline     text        NOT NULL,
    dimension    text        NOT NULL,
    dimension_id text        NOT NULL,
    name         text        NOT NULL,
    short_name   text        NULL,
    observed_at  timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, dimension, dimension_id),
    CONSTRAINT names_dimension CHECK (dimension IN ('line', 'station')),
    CONSTRAINT names_not_empty CHECK (name <> '' AND short_name <> ''),
    CONSTRAINT names_short_name CHECK (dimension = 'line' OR short_name IS NULL)
);
