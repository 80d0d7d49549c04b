// The Flink SQL peer of the benchmark: the job a data engineer would write
// instead of ovstream. It reads the predictions topic once, from the earliest
// offsets to the end offsets it finds at start (bounded), and writes one row
// per tumbling window and dimension (line, station, operator, network) into a
// PostgreSQL table: count, mean, P90 (Flink's built-in exact PERCENTILE), min
// and max, plus the one operator of the row's events (NULL when several). One
// job, in a MiniCluster in this JVM. It exits 0 once the job has finished.
//
// Two forms of the same four window queries:
// - at-least-once (the default): four INSERTs in one StatementSet, the SQL
//   JDBC connector upserting in batches, no checkpoints;
// - exactly-once (--exactly-once true): the four queries' rows in one
//   insert-only stream (windows are final) written by the JDBC connector's
//   XA sink of the DataStream API (the SQL connector has none): each sink
//   writer's rows of a checkpoint are one XA transaction of PostgreSQL,
//   prepared at the checkpoint and committed once it completes; the bounded
//   job ends with a final checkpoint, so every row is committed when the job
//   finishes. The server needs max_prepared_transactions >= parallelism.
//
// It does less than ovstream: no stored distributions, no dead letters (a
// record it cannot parse or that breaks the data contract is dropped), no
// Kafka offsets written with the rows.
//
// Usage: java -cp CLASSES:JARS/* Main --bootstrap HOST:PORT --topic T
//   --jdbc-url jdbc:postgresql://... --table T [--window-seconds 300]
//   [--lateness-seconds 600] [--parallelism 2] [--group flinkpeer]
//   [--flush-rows 5000] [--exactly-once false] [--checkpoint-seconds 10]
//   [--max-delay-seconds 43200]
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.jdbc.JdbcExactlyOnceOptions;
import org.apache.flink.connector.jdbc.JdbcExecutionOptions;
import org.apache.flink.connector.jdbc.core.datastream.sink.JdbcSink;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;
import org.postgresql.xa.PGXADataSource;

public class Main {
    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        a.put("window-seconds", "300");
        a.put("lateness-seconds", "600");
        a.put("parallelism", "2");
        a.put("group", "flinkpeer");
        a.put("flush-rows", "5000");
        a.put("exactly-once", "false");
        a.put("checkpoint-seconds", "10");
        a.put("max-delay-seconds", "43200");
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
        boolean exactlyOnce = Boolean.parseBoolean(a.get("exactly-once"));

        Configuration conf = new Configuration();
        conf.setString("parallelism.default", a.get("parallelism"));
        conf.setString("table.local-time-zone", "UTC");
        Path checkpoints = null;
        if (exactlyOnce) {
            // Checkpoints on disk: the window state (every delay of an open
            // window, for PERCENTILE) outgrows what the JobManager keeps in
            // memory.
            checkpoints = Files.createTempDirectory("flinkpeer-checkpoints-");
            conf.setString("execution.checkpointing.storage", "filesystem");
            conf.setString("execution.checkpointing.dir", checkpoints.toUri().toString());
        }
        StreamExecutionEnvironment streams = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        if (exactlyOnce) {
            streams.enableCheckpointing(Long.parseLong(a.get("checkpoint-seconds")) * 1000);
        }
        StreamTableEnvironment env = StreamTableEnvironment.create(streams,
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
        // (docs/design.md "Decoding rules"): non-empty ids; and the bound on a
        // plausible delay, |delay_s| <= run's --max-delay (at most 86400).
        env.executeSql("CREATE VIEW valid AS SELECT * FROM predictions\n"
                + "WHERE trip_id <> '' AND line <> '' AND stop_id <> '' AND operator <> ''\n"
                + "  AND delay_s IS NOT NULL AND ABS(delay_s) <= " + Long.parseLong(a.get("max-delay-seconds"))
                + " AND event_time IS NOT NULL");
        List<String> queries = new ArrayList<>();
        String[][] dims = {{"line", "line"}, {"station", "stop_id"}, {"operator", "operator"}, {"network", "'all'"}};
        for (String[] d : dims) {
            queries.add("SELECT window_start, window_end, '" + d[0] + "', CAST(" + d[1] + " AS STRING),\n"
                    + "  CASE WHEN MIN(operator) = MAX(operator) THEN MIN(operator) END,\n"
                    + "  COUNT(*), AVG(delay_s), PERCENTILE(delay_s, 0.9), MIN(delay_s), MAX(delay_s)\n"
                    + "FROM TABLE(TUMBLE(TABLE valid, DESCRIPTOR(event_time), " + interval(window) + "))\n"
                    + "GROUP BY window_start, window_end" + (d[1].startsWith("'") ? "" : ", " + d[1]));
        }

        long began = System.nanoTime();
        String job;
        if (exactlyOnce) {
            job = exactlyOnceSink(streams, env, queries, a);
            deleteTree(checkpoints);
        } else {
            job = atLeastOnceSink(env, queries, a);
        }
        System.out.printf("flinkpeer: job %s finished in %.3f s%n", job, (System.nanoTime() - began) / 1e9);
        System.exit(0);
    }

    /**
     * atLeastOnceSink runs the queries as four INSERTs of one StatementSet into
     * the SQL JDBC connector's table, which upserts in batches (a row written
     * again after a failure overwrites itself), and returns the job's id once
     * it has finished.
     */
    static String atLeastOnceSink(StreamTableEnvironment env, List<String> queries, Map<String, String> a)
            throws Exception {
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
        for (String q : queries) {
            set.addInsertSql("INSERT INTO aggregates\n" + q);
        }
        TableResult r = set.execute();
        r.await();
        return r.getJobClient().map(c -> c.getJobID().toString()).orElse("?");
    }

    /**
     * exactlyOnceSink adds to env's stream environment the queries' rows as one
     * stream, insert-only (a window's row is emitted once, when the watermark
     * passes its end), into the XA sink of the JDBC connector, runs the job and
     * returns its id once it has finished. The statement is a plain INSERT: each row is written once,
     * in the transaction of its checkpoint, so a second row of a key would be a
     * fault, and the table's primary key makes it fail the job rather than hide.
     */
    static String exactlyOnceSink(StreamExecutionEnvironment streams, StreamTableEnvironment env, List<String> queries,
            Map<String, String> a) throws Exception {
        String url = a.get("jdbc-url");
        env.toDataStream(env.sqlQuery(String.join("\nUNION ALL\n", queries))).sinkTo(JdbcSink.<Row>builder()
                .withQueryStatement("INSERT INTO " + a.get("table") + " (window_start, window_end, dimension, dimension_id,"
                        + " operator, event_count, mean_delay_s, p90_delay_s, min_delay_s, max_delay_s)"
                        + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (ps, r) -> {
                            // window_start and window_end are TIMESTAMP(3) in UTC.
                            ps.setObject(1, r.<LocalDateTime>getFieldAs(0).atOffset(ZoneOffset.UTC));
                            ps.setObject(2, r.<LocalDateTime>getFieldAs(1).atOffset(ZoneOffset.UTC));
                            for (int i = 2; i < 10; i++) {
                                ps.setObject(i + 1, r.getField(i));
                            }
                        })
                // Retries would write a batch twice; the connector refuses them.
                .withExecutionOptions(JdbcExecutionOptions.builder()
                        .withBatchSize(Integer.parseInt(a.get("flush-rows"))).withMaxRetries(0).build())
                // PostgreSQL runs one XA transaction per connection.
                .buildExactlyOnce(JdbcExactlyOnceOptions.builder().withTransactionPerConnection(true).build(), () -> {
                    PGXADataSource ds = new PGXADataSource();
                    ds.setUrl(url);
                    return ds;
                }));
        return streams.execute("flinkpeer exactly-once").getJobID().toString();
    }

    /** deleteTree removes the folder dir and everything in it. */
    static void deleteTree(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : (Iterable<Path>) s.sorted(Comparator.reverseOrder())::iterator) {
                Files.delete(p);
            }
        }
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
