package io.redislock.jdbc;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.Statement;
import java.util.Locale;
import java.util.Optional;

/**
 * The databases a fence is written for, each with its statements exactly as docs/fencing.md gives
 * them: the fence statement (how it tells "ours" from "a newer token is stored") and the table's
 * DDL. {@link #detect} finds it from the connection's database product name.
 */
public enum Dialect {
    /** PostgreSQL: one upsert; 1 row affected, the fence is ours; 0, a larger token is stored. */
    POSTGRESQL {
        @Override
        String upsert(String table) {
            return "INSERT INTO " + table + " (name, token) VALUES (?, ?)"
                    + " ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token"
                    + " WHERE " + unqualified(table) + ".token <= EXCLUDED.token";
        }

        @Override
        String createTable(String table) {
            return "CREATE TABLE IF NOT EXISTS " + table + " (name text PRIMARY KEY, token bigint NOT NULL)";
        }
    },

    /**
     * MySQL and MariaDB (InnoDB): the upsert keeps the larger token, then the stored one is read
     * back under the row lock the upsert took (MySQL's affected-row counts cannot tell "newer"
     * from "the same").
     */
    MYSQL {
        @Override
        String upsert(String table) {
            return "INSERT INTO " + table + " (name, token) VALUES (?, ?)"
                    + " ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))";
        }

        @Override
        String readBack(String table) {
            return "SELECT token FROM " + table + " WHERE name = ? FOR UPDATE";
        }

        @Override
        String createTable(String table) {
            return "CREATE TABLE IF NOT EXISTS " + table
                    + " (name VARBINARY(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE = InnoDB";
        }

        @Override
        boolean raise(Connection connection, String table, String name, long token) throws SQLException {
            try (PreparedStatement up = connection.prepareStatement(upsert(table))) {
                up.setString(1, name);
                up.setLong(2, token);
                up.executeUpdate();
            }
            try (PreparedStatement read = connection.prepareStatement(readBack(table))) {
                read.setString(1, name);
                try (ResultSet rs = read.executeQuery()) {
                    if (!rs.next()) {
                        throw new SQLException("the fence '" + name + "' is not in " + table + " after its upsert");
                    }
                    long stored = rs.getLong(1);
                    if (stored < token) {
                        throw new SQLException("the fence '" + name + "' of " + table + " holds " + stored
                                + " after it was raised to " + token + ": not the table of docs/fencing.md");
                    }
                    return stored == token;
                }
            }
        }
    },

    /**
     * SQLite (3.24 or newer): PostgreSQL's upsert, {@code changes()} 1 or 0. The fence is the
     * transaction's first statement, so it takes the write lock before any read even in a
     * deferred transaction; set a busy timeout so the next holder waits instead of failing.
     */
    SQLITE {
        @Override
        String upsert(String table) {
            return "INSERT INTO " + table + " (name, token) VALUES (?, ?)"
                    + " ON CONFLICT (name) DO UPDATE SET token = excluded.token"
                    + " WHERE " + unqualified(table) + ".token <= excluded.token";
        }

        @Override
        String createTable(String table) {
            return "CREATE TABLE IF NOT EXISTS " + table + " (name TEXT PRIMARY KEY, token INTEGER NOT NULL)";
        }
    };

    /** The fence statement: stores {@code token} under {@code name} unless a larger one is stored. */
    abstract String upsert(String table);

    /** The statement that reads the stored token back, for the dialects that need it; else null. */
    String readBack(String table) {
        return null;
    }

    /** {@code CREATE TABLE IF NOT EXISTS} with this database's column types. */
    abstract String createTable(String table);

    /**
     * Runs the fence statement in the connection's transaction: true if the fence is now {@code
     * token} (raised, or already it), false if a larger token is stored.
     */
    boolean raise(Connection connection, String table, String name, long token) throws SQLException {
        try (PreparedStatement up = connection.prepareStatement(upsert(table))) {
            up.setString(1, name);
            up.setLong(2, token);
            return up.executeUpdate() > 0;
        }
    }

    void create(Connection connection, String table) throws SQLException {
        try (Statement s = connection.createStatement()) {
            s.execute(createTable(table));
        }
    }

    /** The table name without its schema: how the statements name the table's columns. */
    static String unqualified(String table) {
        return table.substring(table.lastIndexOf('.') + 1);
    }

    /** The dialect of a database product name as JDBC drivers report it, if it is one of these. */
    public static Optional<Dialect> forProductName(String productName) {
        if (productName == null) {
            return Optional.empty();
        }
        switch (productName.trim().toLowerCase(Locale.ROOT)) {
            case "postgresql":
                return Optional.of(POSTGRESQL);
            case "mysql":
            case "mariadb":
                return Optional.of(MYSQL);
            case "sqlite":
                return Optional.of(SQLITE);
            default:
                return Optional.empty();
        }
    }

    /**
     * The dialect of the connection's database ({@code getMetaData().getDatabaseProductName()});
     * {@link SQLFeatureNotSupportedException} for any other database.
     */
    public static Dialect detect(Connection connection) throws SQLException {
        String product = connection.getMetaData().getDatabaseProductName();
        return forProductName(product).orElseThrow(() -> new SQLFeatureNotSupportedException(
                "no fence statement for the database '" + product + "' (PostgreSQL, MySQL/MariaDB and SQLite have one);"
                        + " for a database that speaks one of theirs, name it with FenceOptions.dialect(...)"));
    }
}
