-- Back to version 18: the accuracy function and the prediction history go.
DROP FUNCTION IF EXISTS ovs_accuracy(text, text, timestamptz, timestamptz, double precision[], double precision[],
    double precision[], double precision[], text[], double precision);
ALTER TABLE stop_visits
    DROP COLUMN IF EXISTS prediction_times,
    DROP COLUMN IF EXISTS prediction_delays;
