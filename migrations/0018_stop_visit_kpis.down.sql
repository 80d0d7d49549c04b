DROP FUNCTION ovs_headways(text, text, timestamptz, timestamptz, interval, text, text[], boolean, double precision, double precision);
DROP FUNCTION ovs_on_time(text, text, timestamptz, timestamptz, interval, text, double precision, double precision, text[], boolean, double precision);
DROP FUNCTION ovs_check_visit_query(text, timestamptz, timestamptz, double precision[], text[]);
DROP FUNCTION ovs_visit_realized(timestamptz, timestamptz, double precision);
DROP FUNCTION ovs_visit_bucket(timestamptz, date, interval, text, timestamptz, boolean);
DROP FUNCTION ovs_visit_dimension_id(text, text, text, text);
ALTER TABLE stop_visits DROP COLUMN arrival_predicted;
