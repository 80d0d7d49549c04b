DROP TABLE stop_visit_counts;
DROP TABLE stop_visits;
