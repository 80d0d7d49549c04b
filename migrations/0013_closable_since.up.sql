-- Freshness (issue 26): each instance's heartbeat also says since when its
-- oldest window that is closable (the watermark passed its end) but not yet
-- committed has been closable, by its records' Kafka timestamps; NULL when
-- every closable window is written. `ovstream status` and the dashboard's
-- health page print its age.
ALTER TABLE pipeline_instances ADD COLUMN closable_since timestamptz NULL;
