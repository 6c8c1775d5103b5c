package io.redislock.jdbc;

import io.redislock.Hold;
import io.redislock.StaleTokenException;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Objects;
import javax.sql.DataSource;

/**
 * Fenced writes to a database (rule 13 of docs/clients.md, the recipe of docs/fencing.md): a
 * transaction whose <b>first</b> statement raises the resource's fence in a table of fences to the
 * hold's token, then the caller's reads and writes, then the commit. The fence row's lock orders
 * two holders' transactions; a larger token already stored means a newer holder has been in: the
 * transaction is rolled back before the body runs and {@link StaleTokenException} is thrown.
 *
 * <pre>{@code
 * try (Hold hold = locks.acquire("{sku:9}:lock", Duration.ofSeconds(5))) {
 *     JdbcFence.inTransaction(dataSource, hold, connection -> {
 *         // read, decide, write: plain statements, no token in them
 *         return null;
 *     });
 * }
 * }</pre>
 *
 * <p>The database decides, not the lease: a hold believed lost is not refused here, and nothing is
 * retried. PostgreSQL, MySQL/MariaDB and SQLite ({@link Dialect}, found from the connection). The
 * fence table is never created by the helper: {@link #createTable} creates it once.
 */
public final class JdbcFence {
    private JdbcFence() {}

    /** {@link #inTransaction(DataSource, Hold, FenceOptions, SqlFunction)} with the default options. */
    public static <T> T inTransaction(DataSource dataSource, Hold hold, SqlFunction<Connection, T> body)
            throws SQLException {
        return inTransaction(dataSource, hold, FenceOptions.defaults(), body);
    }

    /**
     * Takes a connection from {@code dataSource}, runs {@link #inTransaction(Connection, Hold,
     * FenceOptions, SqlFunction)} on it and closes it (back to its pool).
     */
    public static <T> T inTransaction(DataSource dataSource, Hold hold, FenceOptions options,
            SqlFunction<Connection, T> body) throws SQLException {
        Objects.requireNonNull(dataSource, "dataSource");
        try (Connection connection = dataSource.getConnection()) {
            return inTransaction(connection, hold, options, body);
        }
    }

    /** {@link #inTransaction(Connection, Hold, FenceOptions, SqlFunction)} with the default options. */
    public static <T> T inTransaction(Connection connection, Hold hold, SqlFunction<Connection, T> body)
            throws SQLException {
        return inTransaction(connection, hold, FenceOptions.defaults(), body);
    }

    /**
     * One fenced transaction on a connection the caller owns: raises the fence as the first
     * statement, runs {@code body} with the connection, commits, and returns what the body returned.
     * The body's exception rolls the transaction back and is rethrown as it is; a larger token in
     * the fence table rolls back before the body runs and throws {@link StaleTokenException}. A
     * connection in autocommit mode is switched out of it for the transaction and back after; one
     * already out of it must have no statement of its own run since its last commit or rollback.
     */
    public static <T> T inTransaction(Connection connection, Hold hold, FenceOptions options,
            SqlFunction<Connection, T> body) throws SQLException {
        Objects.requireNonNull(hold, "hold");
        Objects.requireNonNull(options, "options");
        Objects.requireNonNull(body, "body");
        Dialect dialect = options.dialectOf(connection);
        boolean autoCommit = connection.getAutoCommit();
        if (autoCommit) {
            connection.setAutoCommit(false);
        }
        T result;
        try {
            raise(connection, dialect, hold, options);
            result = body.apply(connection);
            connection.commit();
        } catch (Throwable e) {
            try {
                connection.rollback();
            } catch (SQLException | RuntimeException rollback) {
                e.addSuppressed(rollback);
            }
            if (autoCommit) {
                try {
                    connection.setAutoCommit(true);
                } catch (SQLException | RuntimeException restore) {
                    e.addSuppressed(restore);
                }
            }
            throw e;
        }
        if (autoCommit) {
            connection.setAutoCommit(true);
        }
        return result;
    }

    /** {@link #fence(Connection, Hold, FenceOptions)} with the default options. */
    public static void fence(Connection connection, Hold hold) throws SQLException {
        fence(connection, hold, FenceOptions.defaults());
    }

    /**
     * Only the fence statement, in a transaction the caller (or a framework) manages, which must
     * run it as the transaction's first statement and roll back when it throws {@link
     * StaleTokenException}. {@link IllegalStateException} on a connection in autocommit mode: a
     * fence outside a transaction orders nothing.
     */
    public static void fence(Connection connection, Hold hold, FenceOptions options) throws SQLException {
        Objects.requireNonNull(hold, "hold");
        Objects.requireNonNull(options, "options");
        if (connection.getAutoCommit()) {
            throw new IllegalStateException("a fence needs a transaction: the connection is in autocommit mode");
        }
        raise(connection, options.dialectOf(connection), hold, options);
    }

    private static void raise(Connection connection, Dialect dialect, Hold hold, FenceOptions options)
            throws SQLException {
        String name = options.nameFor(hold);
        if (!dialect.raise(connection, options.table(), name, hold.token())) {
            throw new StaleTokenException("STALE the fence '" + name + "' in " + options.table()
                    + " holds a token newer than this hold's " + hold.token() + ": a newer holder has been in");
        }
    }

    /** {@link #createTable(Connection, FenceOptions)} of {@code lock_fences}. */
    public static void createTable(Connection connection) throws SQLException {
        createTable(connection, FenceOptions.defaults());
    }

    /**
     * Creates the options' fence table unless it exists ({@code CREATE TABLE IF NOT EXISTS}, the DDL
     * of docs/fencing.md for the connection's database), in the connection as it is: commit it
     * yourself if it is not in autocommit mode.
     */
    public static void createTable(Connection connection, FenceOptions options) throws SQLException {
        options.dialectOf(connection).create(connection, options.table());
    }

    /** {@link #createTable(DataSource, FenceOptions)} of {@code lock_fences}. */
    public static void createTable(DataSource dataSource) throws SQLException {
        createTable(dataSource, FenceOptions.defaults());
    }

    /** {@link #createTable(Connection, FenceOptions)} on a connection of its own, committed. */
    public static void createTable(DataSource dataSource, FenceOptions options) throws SQLException {
        try (Connection connection = dataSource.getConnection()) {
            createTable(connection, options);
            if (!connection.getAutoCommit()) {
                connection.commit();
            }
        }
    }
}
