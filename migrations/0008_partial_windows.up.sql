-- ovstream schema, version 8: partial aggregates stored per (window, source
-- partition) instead of per (window, row, source partition) (issue 14: the
-- split mode wrote, read back and deleted every partial row through a
-- six-column primary key; at 1M predictions that was most of its time). One
-- implicit transaction (see 0001); no BEGIN/COMMIT here.
--
-- One row holds every row of one window over the events of one source
-- partition of the predictions topic: dimension, id, operator and exact
-- distribution, in the binary layout of aggregate.PartialWindow (sorted by
-- dimension, then id bytewise; integers big-endian as int4send/int8send
-- write them, delays as float8send). Writing a window's partition again (a
-- restart, a takeover, an ambiguous COMMIT) replaces it, never adds.
CREATE TABLE delay_partial_windows (
    pipeline     text        NOT NULL,
    window_start timestamptz NOT NULL,
    topic        text        NOT NULL, -- the predictions topic
    partition    integer     NOT NULL CONSTRAINT delay_partial_windows_partition CHECK (partition >= 0),
    window_end   timestamptz NOT NULL,
    row_count    integer     NOT NULL CONSTRAINT delay_partial_windows_row_count CHECK (row_count > 0),
    rows         bytea       NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, window_start, topic, partition),
    CONSTRAINT delay_partial_windows_window CHECK (window_end > window_start)
);
-- Stored out of line without compression: the rows live until the merge,
-- and pglz spent about as long compressing them as COPY spent writing the
-- merged rows (make bench, 1M predictions: COPY of the partial windows 5.2 s
-- of server time with compression, 1.5 s without).
ALTER TABLE delay_partial_windows ALTER COLUMN rows SET STORAGE EXTERNAL;

-- The partials of schema 4-7 waiting for the merge, converted: per (window,
-- partition) the rows in the same order and layout the binary writes. An id
-- or operator is written as the bytes ovstream reads for it through the
-- database URL it migrates with: the text in this session's client_encoding
-- (convert_to), with the length and order of these bytes. That is UTF-8 in
-- a UTF8 database, and in a LATIN1 or WIN1252 one too: there ovstream's
-- UTF-8 is stored byte for byte as text of that encoding when the URL sets
-- no client_encoding (pgx sets none), converted when it sets UTF8; neither
-- octet_length(text) nor convert_to(text, 'UTF8') nor COLLATE "C" counts,
-- gives and orders those bytes in both cases.
-- Corrected after release: golang-migrate runs a version once, so the
-- correction serves the databases not yet at 8. Those that reached 8 before
-- it were converted alike when their encoding and client_encoding were UTF8 or
-- their pending ids and operators ASCII; any other got corrupt partial
-- windows.
INSERT INTO delay_partial_windows (pipeline, window_start, topic, partition, window_end, row_count, rows)
SELECT pipeline, window_start, topic, partition, min(window_end), count(*),
       string_agg(r, ''::bytea ORDER BY dimension COLLATE "C", id) -- bytea orders bytewise
FROM (SELECT pipeline, window_start, topic, partition, window_end, dimension, b.id,
             set_byte('\x00'::bytea, 0, array_position(ARRAY['line', 'network', 'operator', 'station'], dimension) - 1)
             || int4send(octet_length(b.id)) || b.id
             || CASE WHEN b.op IS NULL THEN int4send(-1) ELSE int4send(octet_length(b.op)) || b.op END
             || int4send(cardinality(delay_values))
             || (SELECT string_agg(float8send(CASE WHEN u.v = 0 THEN 0 ELSE u.v END) || int8send(u.c), ''::bytea ORDER BY u.v)
                 FROM unnest(delay_values, delay_counts) AS u(v, c)) AS r
      FROM delay_partials,
           LATERAL (SELECT convert_to(dimension_id, pg_client_encoding()),
                           convert_to(nullif(operator, ''), pg_client_encoding())) AS b(id, op)
     ) AS p
GROUP BY pipeline, window_start, topic, partition;

DROP TABLE delay_partials;
