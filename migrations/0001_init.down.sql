-- Drops every ovstream table and ALL their data.
DROP TABLE IF EXISTS pipelines;
DROP TABLE IF EXISTS stream_positions;
DROP TABLE IF EXISTS dead_letters;
DROP TABLE IF EXISTS trip_delay_latest;
DROP TABLE IF EXISTS vehicle_latest;
DROP TABLE IF EXISTS delay_aggregates;
