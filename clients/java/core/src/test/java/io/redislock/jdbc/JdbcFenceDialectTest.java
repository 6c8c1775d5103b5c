package io.redislock.jdbc;

import static org.junit.jupiter.api.Assertions.*;

import io.redislock.jdbc.TestDatabase.Kind;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.SQLFeatureNotSupportedException;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** The dialects: found from the driver, their SQL (the statements of docs/fencing.md), the table names taken. */
class JdbcFenceDialectTest {
    @Test
    void theDialectOfAProductName() {
        assertEquals(Optional.of(Dialect.POSTGRESQL), Dialect.forProductName("PostgreSQL"));
        assertEquals(Optional.of(Dialect.MYSQL), Dialect.forProductName("MariaDB"));
        assertEquals(Optional.of(Dialect.MYSQL), Dialect.forProductName("MySQL"));
        assertEquals(Optional.of(Dialect.SQLITE), Dialect.forProductName("SQLite"));
        assertEquals(Optional.of(Dialect.POSTGRESQL), Dialect.forProductName(" postgresql "));
        for (String other : new String[] {"H2", "Oracle", "Microsoft SQL Server", "Apache Derby", ""}) {
            assertEquals(Optional.empty(), Dialect.forProductName(other), other);
        }
        assertEquals(Optional.empty(), Dialect.forProductName(null));
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void eachDriverIsDetected(Kind kind) throws Exception {
        Dialect expected = kind == Kind.POSTGRES ? Dialect.POSTGRESQL : kind == Kind.MARIADB ? Dialect.MYSQL : Dialect.SQLITE;
        try (Connection c = TestDatabase.of(kind).connect()) {
            assertEquals(expected, Dialect.detect(c));
        }
    }

    @Test
    void anotherDatabaseIsAClearError_unlessItsDialectIsNamed() throws Exception {
        TestDatabase db = TestDatabase.of(Kind.SQLITE);
        try (Connection real = db.connect()) {
            Connection h2 = reportingProduct(real, "H2");
            SQLFeatureNotSupportedException e = assertThrows(SQLFeatureNotSupportedException.class,
                    () -> JdbcFence.createTable(h2));
            assertTrue(e.getMessage().contains("'H2'") && e.getMessage().contains("FenceOptions.dialect"), e.getMessage());
            JdbcFence.createTable(h2, FenceOptions.defaults().dialect(Dialect.SQLITE));
            assertEquals(0, db.queryLong("SELECT count(*) FROM lock_fences"), "created with the named dialect");
        }
    }

    /** {@code connection}, but its metadata names another database product. */
    private static Connection reportingProduct(Connection connection, String product) throws Exception {
        DatabaseMetaData meta = connection.getMetaData();
        DatabaseMetaData other = (DatabaseMetaData) Proxy.newProxyInstance(DatabaseMetaData.class.getClassLoader(),
                new Class<?>[] {DatabaseMetaData.class},
                (p, m, args) -> m.getName().equals("getDatabaseProductName") ? product : invoke(m, meta, args));
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
                (p, m, args) -> m.getName().equals("getMetaData") ? other : invoke(m, connection, args));
    }

    private static Object invoke(java.lang.reflect.Method m, Object target, Object[] args) throws Throwable {
        try {
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    @Test
    void tableNamesAreIdentifiers_optionallySchemaQualified() {
        for (String ok : List.of("lock_fences", "_f", "Fences2", "inventory.lock_fences", "a._b")) {
            assertDoesNotThrow(() -> FenceOptions.defaults().table(ok), ok);
        }
        for (String bad : List.of("", "1fences", "lock-fences", "a.b.c", "a.", ".a", "a b", "\"quoted\"",
                "x; DROP TABLE stock", "lock_fences--", "fenceé")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> FenceOptions.defaults().table(bad), bad);
            assertTrue(e.getMessage().contains(bad), e.getMessage());
        }
        assertThrows(IllegalArgumentException.class, () -> FenceOptions.defaults().name(""));
        assertThrows(IllegalArgumentException.class, () -> FenceOptions.defaults().dialect(null));
    }

    @Test
    void theStatementsOfEachDialect() {
        assertEquals("INSERT INTO lock_fences (name, token) VALUES (?, ?)"
                + " ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE lock_fences.token <= EXCLUDED.token",
                Dialect.POSTGRESQL.upsert("lock_fences"));
        assertEquals("INSERT INTO lock_fences (name, token) VALUES (?, ?)"
                + " ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE lock_fences.token <= excluded.token",
                Dialect.SQLITE.upsert("lock_fences"));
        assertEquals("INSERT INTO lock_fences (name, token) VALUES (?, ?)"
                + " ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))", Dialect.MYSQL.upsert("lock_fences"));
        assertEquals("SELECT token FROM lock_fences WHERE name = ? FOR UPDATE", Dialect.MYSQL.readBack("lock_fences"));
        assertNull(Dialect.POSTGRESQL.readBack("lock_fences"), "one statement: its row count decides");
        assertNull(Dialect.SQLITE.readBack("lock_fences"), "one statement: changes() decides");
        // A schema-qualified table: its columns are named by the table's own name.
        assertEquals("INSERT INTO inventory.fences (name, token) VALUES (?, ?)"
                + " ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE fences.token <= EXCLUDED.token",
                Dialect.POSTGRESQL.upsert("inventory.fences"));
        assertEquals("CREATE TABLE IF NOT EXISTS lock_fences (name text PRIMARY KEY, token bigint NOT NULL)",
                Dialect.POSTGRESQL.createTable("lock_fences"));
        assertEquals("CREATE TABLE IF NOT EXISTS lock_fences (name VARBINARY(255) PRIMARY KEY, token BIGINT NOT NULL)"
                + " ENGINE = InnoDB", Dialect.MYSQL.createTable("lock_fences"));
        assertEquals("CREATE TABLE IF NOT EXISTS lock_fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL)",
                Dialect.SQLITE.createTable("lock_fences"));
    }

    /** Every statement is the one docs/fencing.md gives (its :name and :token are JDBC's ?). */
    @Test
    void theStatementsAreThoseOfTheFencingPage() throws Exception {
        String page = normalize(Files.readString(Path.of("../../../docs/fencing.md"))
                .replace("(:name, :token)", "(?, ?)").replace("name = :name", "name = ?"));
        for (Dialect d : Dialect.values()) {
            for (String sql : new String[] {d.upsert("lock_fences"), d.readBack("lock_fences"), d.createTable("lock_fences")}) {
                if (sql != null) {
                    assertTrue(page.contains(normalize(sql)), d + ": not a statement of docs/fencing.md: " + sql);
                }
            }
        }
    }

    /** Whitespace squeezed, none inside parentheses' edges, no statement-ending semicolons. */
    private static String normalize(String sql) {
        return sql.replaceAll("\\s+", " ").replace("( ", "(").replace(" )", ")").replace(";", "");
    }
}
