DROP VIEW delay_aggregates_live;
DROP TABLE provisional_positions;
DROP TABLE delay_aggregates_provisional;
