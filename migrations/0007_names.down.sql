-- Back to version 5 (or 6): the names are dropped; producers' records still
-- carry them, and a later `up` fills the table again from the next records.
DROP TABLE IF EXISTS names;
