// The Flink SQL peer of the benchmark: the job a data engineer would write
// instead of ovstream. It reads the predictions topic once, from the earliest
// offsets to the end offsets it finds at start (bounded), and upserts one row
// per tumbling window and dimension (line, station, operator, network) into a
// PostgreSQL table through the JDBC connector: count, mean, P90 (Flink's
// built-in exact PERCENTILE), min and max, plus the one operator of the row's
// events (NULL when several). Four INSERTs in one StatementSet, one job, in a
// MiniCluster in this JVM. It exits 0 once the job has finished.
//
// It does less than ovstream: no stored distributions, no dead letters (a
// record it cannot parse or that breaks the data contract is dropped), no
// Kafka offsets written with the rows, at-least-once upserts.
//
// Usage: java -cp CLASSES:JARS/* Main --bootstrap HOST:PORT --topic T
//   --jdbc-url jdbc:postgresql://... --table T [--window-seconds 300]
//   [--lateness-seconds 600] [--parallelism 2] [--group flinkpeer]
//   [--flush-rows 5000]
import java.util.HashMap;
import java.util.Map;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;

public class Main {
    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        a.put("window-seconds", "300");
        a.put("lateness-seconds", "600");
        a.put("parallelism", "2");
        a.put("group", "flinkpeer");
        a.put("flush-rows", "5000");
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("flinkpeer: want --name value pairs, got " + args[i]);
            }
            a.put(args[i].substring(2), args[++i]);
        }
        for (String k : new String[] {"bootstrap", "topic", "jdbc-url", "table"}) {
            if (!a.containsKey(k)) {
                throw new IllegalArgumentException("flinkpeer: --" + k + " is required");
            }
        }
        long window = Long.parseLong(a.get("window-seconds"));
        long lateness = Long.parseLong(a.get("lateness-seconds"));

        Configuration conf = new Configuration();
        conf.setString("parallelism.default", a.get("parallelism"));
        conf.setString("table.local-time-zone", "UTC");
        TableEnvironment env = TableEnvironment.create(
                EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(conf).build());

        // event_time is RFC 3339 in UTC ("...Z"), as ovstream produce writes it;
        // a record that does not parse, or misses a field, is dropped.
        env.executeSql("CREATE TABLE predictions (\n"
                + "  trip_id STRING, line STRING, stop_id STRING, operator STRING,\n"
                + "  delay_s DOUBLE, event_time TIMESTAMP_LTZ(3),\n"
                + "  WATERMARK FOR event_time AS event_time - " + interval(lateness) + "\n"
                + ") WITH (\n"
                + "  'connector' = 'kafka',\n"
                + "  'topic' = '" + sqlString(a.get("topic")) + "',\n"
                + "  'properties.bootstrap.servers' = '" + sqlString(a.get("bootstrap")) + "',\n"
                + "  'properties.group.id' = '" + sqlString(a.get("group")) + "',\n"
                + "  'properties.isolation.level' = 'read_committed',\n"
                + "  'scan.startup.mode' = 'earliest-offset',\n"
                + "  'scan.bounded.mode' = 'latest-offset',\n"
                + "  'format' = 'json',\n"
                + "  'json.ignore-parse-errors' = 'true',\n"
                + "  'json.timestamp-format.standard' = 'ISO-8601'\n"
                + ")");
        // The data contract's rules that a SQL filter can state
        // (docs/design.md "Decoding rules"): non-empty ids, |delay_s| <= 86400.
        env.executeSql("CREATE VIEW valid AS SELECT * FROM predictions\n"
                + "WHERE trip_id <> '' AND line <> '' AND stop_id <> '' AND operator <> ''\n"
                + "  AND delay_s IS NOT NULL AND ABS(delay_s) <= 86400 AND event_time IS NOT NULL");
        // The JDBC sink refuses a username without a password: the user goes
        // in the URL.
        env.executeSql("CREATE TABLE aggregates (\n"
                + "  window_start TIMESTAMP(3), window_end TIMESTAMP(3), dimension STRING, dimension_id STRING,\n"
                + "  operator STRING, event_count BIGINT, mean_delay_s DOUBLE, p90_delay_s DOUBLE,\n"
                + "  min_delay_s DOUBLE, max_delay_s DOUBLE,\n"
                + "  PRIMARY KEY (window_start, dimension, dimension_id) NOT ENFORCED\n"
                + ") WITH (\n"
                + "  'connector' = 'jdbc',\n"
                + "  'url' = '" + sqlString(a.get("jdbc-url")) + "',\n"
                + "  'table-name' = '" + sqlString(a.get("table")) + "',\n"
                + "  'sink.buffer-flush.max-rows' = '" + Integer.parseInt(a.get("flush-rows")) + "'\n"
                + ")");
        StatementSet set = env.createStatementSet();
        String[][] dims = {{"line", "line"}, {"station", "stop_id"}, {"operator", "operator"}, {"network", "'all'"}};
        for (String[] d : dims) {
            set.addInsertSql("INSERT INTO aggregates\n"
                    + "SELECT window_start, window_end, '" + d[0] + "', " + d[1] + ",\n"
                    + "  CASE WHEN MIN(operator) = MAX(operator) THEN MIN(operator) END,\n"
                    + "  COUNT(*), AVG(delay_s), PERCENTILE(delay_s, 0.9), MIN(delay_s), MAX(delay_s)\n"
                    + "FROM TABLE(TUMBLE(TABLE valid, DESCRIPTOR(event_time), " + interval(window) + "))\n"
                    + "GROUP BY window_start, window_end" + (d[1].startsWith("'") ? "" : ", " + d[1]));
        }
        long began = System.nanoTime();
        TableResult r = set.execute();
        r.await();
        System.out.printf("flinkpeer: job %s finished in %.3f s%n",
                r.getJobClient().map(c -> c.getJobID().toString()).orElse("?"), (System.nanoTime() - began) / 1e9);
        System.exit(0);
    }

    /** interval is an interval literal of s seconds (at most 99 hours). */
    static String interval(long s) {
        return String.format("INTERVAL '%d:%02d:%02d' HOUR TO SECOND", s / 3600, s / 60 % 60, s % 60);
    }

    /** sqlString escapes s for a SQL string literal. */
    static String sqlString(String s) {
        return s.replace("'", "''");
    }
}
