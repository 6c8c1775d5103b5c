package io.redislock.jdbc;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.ds.PGSimpleDataSource;
import org.sqlite.SQLiteDataSource;

/**
 * A real database for the fenced-transaction tests. PostgreSQL and MariaDB: one throwaway server
 * each per test JVM, started on first use by the repository's scripts/testdb.sh (in a new
 * directory of the system's temp dir) and stopped by it when the JVM exits (and by the script's
 * watcher if the JVM dies first); tests share it and give themselves tables of their own
 * ({@link #unique}). SQLite: a new database file per {@link #of} in the temp dir, in process,
 * with a busy timeout. Public, in the core's test-jar, for the spring module's tests.
 */
public final class TestDatabase {
    public enum Kind {
        POSTGRES, MARIADB, SQLITE
    }

    /** How long a SQLite connection waits for the write lock (rule: the next holder waits). */
    static final int SQLITE_BUSY_MS = 30_000;

    private static final Map<Kind, TestDatabase> SERVERS = new ConcurrentHashMap<>();
    private static final AtomicInteger NAMES = new AtomicInteger();

    public final Kind kind;
    /** The JDBC URL, user included: what a worker JVM connects with. */
    public final String url;
    private final DataSource dataSource;

    private TestDatabase(Kind kind, String url, DataSource dataSource) {
        this.kind = kind;
        this.url = url;
        this.dataSource = dataSource;
    }

    /** The shared server of {@code kind} (started on first use), or a new SQLite database. */
    public static TestDatabase of(Kind kind) {
        if (kind == Kind.SQLITE) {
            return sqlite();
        }
        return SERVERS.computeIfAbsent(kind, TestDatabase::start);
    }

    private static TestDatabase sqlite() {
        try {
            Path file = Files.createTempDirectory("redislock-java-sqlite-").resolve("test.db");
            file.getParent().toFile().deleteOnExit();
            file.toFile().deleteOnExit();
            String url = "jdbc:sqlite:" + file + "?busy_timeout=" + SQLITE_BUSY_MS;
            SQLiteDataSource ds = new SQLiteDataSource();
            ds.setUrl("jdbc:sqlite:" + file);
            ds.setBusyTimeout(SQLITE_BUSY_MS);
            return new TestDatabase(Kind.SQLITE, url, ds);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private static TestDatabase start(Kind kind) {
        String which = kind == Kind.POSTGRES ? "postgres" : "mariadb";
        try {
            Path dir = Files.createTempDirectory("redislock-java-" + which + "-");
            Path script = script();
            Process p = new ProcessBuilder(script.toString(), "start", which, dir.toString(),
                    String.valueOf(ProcessHandle.current().pid())).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(90, TimeUnit.SECONDS) || p.exitValue() != 0) {
                p.destroyForcibly();
                stop(script, dir); // what the failed start left (a server, a directory), by PID
                throw new IllegalStateException("testdb.sh start " + which + " failed:\n" + out);
            }
            Map<String, String> info = new HashMap<>();
            for (String line : out.split("\n")) {
                int eq = line.indexOf('=');
                if (eq > 0) {
                    info.put(line.substring(0, eq), line.substring(eq + 1).trim());
                }
            }
            Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(script, dir)));
            String port = info.get("PORT");
            if (kind == Kind.POSTGRES) {
                String url = "jdbc:postgresql://127.0.0.1:" + port + "/" + info.get("DATABASE") + "?user=" + info.get("USER");
                PGSimpleDataSource ds = new PGSimpleDataSource();
                ds.setURL(url);
                return new TestDatabase(kind, url, ds);
            }
            String url = "jdbc:mariadb://127.0.0.1:" + port + "/" + info.get("DATABASE") + "?user=" + info.get("USER");
            return new TestDatabase(kind, url, new MariaDbDataSource(url));
        } catch (IOException | SQLException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    private static void stop(Path script, Path dir) {
        try {
            new ProcessBuilder(script.toString(), "stop", dir.toString()).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD).start().waitFor(30, TimeUnit.SECONDS);
        } catch (IOException e) {
            // the script's watcher stops it once this JVM is gone
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** scripts/testdb.sh of the repository this build runs in (found upwards from the working dir). */
    private static Path script() {
        for (Path d = Path.of("").toAbsolutePath(); d != null; d = d.getParent()) {
            Path s = d.resolve("scripts/testdb.sh");
            if (Files.isExecutable(s)) {
                return s;
            }
        }
        throw new IllegalStateException("scripts/testdb.sh not found above " + Path.of("").toAbsolutePath());
    }

    public DataSource dataSource() {
        return dataSource;
    }

    public Connection connect() throws SQLException {
        return dataSource.getConnection();
    }

    /** A name no other test of this JVM uses, for its tables: {@code prefix_<n>_<random>}. */
    public static String unique(String prefix) {
        return prefix + "_" + NAMES.incrementAndGet() + "_" + Long.toHexString(System.nanoTime() & 0xffffff);
    }

    /** Runs statements in autocommit mode on a connection of their own. */
    public void exec(String... statements) throws SQLException {
        try (Connection c = connect(); Statement s = c.createStatement()) {
            for (String sql : statements) {
                s.execute(sql);
            }
        }
    }

    /** The first column of the first row of a query (with long parameters), on a connection of its own. */
    public long queryLong(String sql, Object... params) throws SQLException {
        try (Connection c = connect(); PreparedStatement s = c.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                s.setObject(i + 1, params[i]);
            }
            try (ResultSet rs = s.executeQuery()) {
                if (!rs.next()) {
                    throw new SQLException("no row: " + sql);
                }
                return rs.getLong(1);
            }
        }
    }

    /**
     * Waits up to {@code maxMs} until a transaction waits for a row lock in a statement naming
     * {@code table} (pg_stat_activity's wait_event_type 'Lock'; InnoDB's trx_state 'LOCK WAIT', or
     * the statement running for over 100 ms in MariaDB's process list); whether it was seen.
     * SQLite shows no such thing: there, it waits 300 ms (at most {@code maxMs}) and says false. A
     * test may use it to make a schedule likely, never to decide its outcome.
     */
    public boolean awaitLockWaiter(String table, long maxMs) throws SQLException, InterruptedException {
        String sql;
        switch (kind) {
            case POSTGRES:
                sql = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE ?";
                break;
            case MARIADB:
                // innodb_trx does not always list a transaction waiting on a row another one inserted;
                // the process list shows its statement running on (a fence statement alone takes < 1 ms).
                sql = "SELECT (SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'"
                        + " AND trx_query LIKE ?) + (SELECT count(*) FROM information_schema.processlist"
                        + " WHERE info LIKE ? AND time_ms > 100)";
                break;
            default:
                Thread.sleep(Math.min(maxMs, 300));
                return false;
        }
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(maxMs);
        do {
            String like = "%" + table + "%";
            if ((kind == Kind.MARIADB ? queryLong(sql, like, like) : queryLong(sql, like)) > 0) {
                return true;
            }
            Thread.sleep(20);
        } while (System.nanoTime() < end);
        return false;
    }

    @Override
    public String toString() {
        return kind.toString();
    }
}
