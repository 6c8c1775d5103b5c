package io.redislock.jdbc;

import static org.junit.jupiter.api.Assertions.*;

import io.redislock.Hold;
import io.redislock.StaleTokenException;
import io.redislock.jdbc.TestDatabase.Kind;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * What {@link JdbcFence} does with a transaction, on each database: the fence first, the body,
 * the commit; a rollback for the body's exception (rethrown as it is) and for a newer fence (the
 * stale error, before the body); the caller's connection left as it was found; the table never
 * created by the helper, and created once by {@link JdbcFence#createTable}.
 */
class JdbcFenceTransactionTest extends WithRedis {
    /** Two holds of one key, the second granted after the first was released: tOld < tNew. */
    private static Hold[] oldAndNew() throws InterruptedException {
        String key = TestDatabase.unique("k") + ":lock";
        Hold old = locks.acquire(key, Duration.ZERO);
        assertTrue(old.release());
        Hold newer = locks.acquire(key, Duration.ZERO);
        assertTrue(newer.token() > old.token());
        return new Hold[] {old, newer};
    }

    private static long storedToken(TestDatabase db, Shop shop, String name) throws SQLException {
        return db.queryLong("SELECT token FROM " + shop.fences + " WHERE name = ?", name);
    }

    private static long fenceRows(TestDatabase db, Shop shop) throws SQLException {
        return db.queryLong("SELECT count(*) FROM " + shop.fences);
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void theFenceThenTheBodyThenTheCommit_theBodysValueReturned(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        Hold hold = hold();
        int read = JdbcFence.inTransaction(db.dataSource(), hold, shop.options, c -> {
            assertEquals(hold.token(), storedToken(c, shop, hold.key()), "the fence is raised before the body runs");
            int qty = shop.qty(c);
            shop.sell(c, qty, "me");
            return qty;
        });
        assertEquals(100, read);
        assertEquals(99, shop.qty(db), "committed");
        assertEquals(1, shop.sales(db));
        assertEquals(hold.token(), storedToken(db, shop, hold.key()), "the fence is named by the hold's key");
        // The same token again: the fence is already it (<=), a holder may run several transactions.
        JdbcFence.inTransaction(db.dataSource(), hold, shop.options, c -> {
            shop.sell(c, shop.qty(c), "me");
            return null;
        });
        assertEquals(98, shop.qty(db));
        hold.release();
    }

    private static long storedToken(Connection c, Shop shop, String name) throws SQLException {
        try (var s = c.prepareStatement("SELECT token FROM " + shop.fences + " WHERE name = ?")) {
            s.setString(1, name);
            try (var rs = s.executeQuery()) {
                assertTrue(rs.next(), "the fence row is there");
                return rs.getLong(1);
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void theBodysExceptionRollsBackAndIsRethrownAsItIs(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        Hold hold = hold();
        SQLException sql = new SQLException("the body's own");
        IllegalStateException runtime = new IllegalStateException("the body's own too");
        AssertionError error = new AssertionError("and an Error");
        for (Throwable thrown : new Throwable[] {sql, runtime, error}) {
            try (Connection c = db.connect()) {
                Throwable caught = assertThrows(Throwable.class, () -> JdbcFence.inTransaction(c, hold, shop.options, tx -> {
                    shop.sell(tx, shop.qty(tx), "me");
                    if (thrown instanceof SQLException e) {
                        throw e;
                    }
                    if (thrown instanceof RuntimeException e) {
                        throw e;
                    }
                    throw (Error) thrown;
                }));
                assertSame(thrown, caught, "rethrown as it is");
                assertTrue(c.getAutoCommit(), "the connection is back in autocommit mode");
            }
        }
        assertEquals(100, shop.qty(db), "rolled back");
        assertEquals(0, shop.sales(db));
        assertEquals(0, fenceRows(db, shop), "the fence rolled back with it");
        hold.release();
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void aNewerFenceRollsBackBeforeTheBody_theStaleError(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        Hold[] holds = oldAndNew();
        Hold old = holds[0];
        Hold newer = holds[1];
        JdbcFence.inTransaction(db.dataSource(), newer, shop.options, c -> {
            shop.sell(c, shop.qty(c), "newer");
            return null;
        });
        AtomicBoolean ran = new AtomicBoolean();
        try (Connection c = db.connect()) {
            StaleTokenException e = assertThrows(StaleTokenException.class,
                    () -> JdbcFence.inTransaction(c, old, shop.options, tx -> {
                        ran.set(true);
                        shop.sell(tx, shop.qty(tx), "old");
                        return null;
                    }));
            assertTrue(e.getMessage().contains("'" + old.key() + "'") && e.getMessage().contains(shop.fences)
                    && e.getMessage().contains(String.valueOf(old.token())), e.getMessage());
            assertTrue(c.getAutoCommit(), "the connection is back in autocommit mode");
            assertEquals(99, shop.qty(c), "the connection works on");
        }
        assertFalse(ran.get(), "the body never ran");
        assertEquals(newer.token(), storedToken(db, shop, old.key()), "the newer fence stays");
        assertEquals(1, shop.sales(db));
        newer.release();
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void aConnectionOutOfAutocommitStaysOut(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        Hold hold = hold();
        try (Connection c = db.connect()) {
            c.setAutoCommit(false);
            JdbcFence.inTransaction(c, hold, shop.options, tx -> {
                shop.sell(tx, shop.qty(tx), "me");
                return null;
            });
            assertFalse(c.getAutoCommit());
            assertEquals(99, shop.qty(db), "committed: another connection sees it");
            c.rollback();
        }
        hold.release();
    }

    /** sqlite-jdbc's {@code transaction_mode=IMMEDIATE}: the transaction begins IMMEDIATE, the same fence. */
    @org.junit.jupiter.api.Test
    void sqliteInImmediateMode() throws Exception {
        TestDatabase db = TestDatabase.of(Kind.SQLITE);
        Shop shop = Shop.open(db, 100);
        Hold[] holds = oldAndNew();
        try (Connection c = java.sql.DriverManager.getConnection(db.url + "&transaction_mode=IMMEDIATE")) {
            JdbcFence.inTransaction(c, holds[1], shop.options, tx -> {
                shop.sell(tx, shop.qty(tx), "newer");
                return null;
            });
            assertThrows(StaleTokenException.class, () -> JdbcFence.inTransaction(c, holds[0], shop.options,
                    tx -> fail("the body of a stale hold")));
        }
        assertEquals(99, shop.qty(db));
        holds[1].release();
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void fenceAloneInTheCallersTransaction(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        Hold[] holds = oldAndNew();
        try (Connection c = db.connect()) {
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> JdbcFence.fence(c, holds[1], shop.options));
            assertTrue(e.getMessage().contains("autocommit"), e.getMessage());
            assertEquals(0, fenceRows(db, shop), "nothing ran");

            c.setAutoCommit(false);
            JdbcFence.fence(c, holds[1], shop.options);
            shop.sell(c, shop.qty(c), "newer");
            c.commit();
            assertThrows(StaleTokenException.class, () -> JdbcFence.fence(c, holds[0], shop.options));
            c.rollback();
        }
        assertEquals(99, shop.qty(db));
        assertEquals(holds[1].token(), storedToken(db, shop, holds[1].key()));
        holds[1].release();
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void theHelperNeverCreatesTheTable(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        Hold hold = hold();
        String missing = TestDatabase.unique("missing");
        AtomicBoolean ran = new AtomicBoolean();
        try (Connection c = db.connect()) {
            SQLException e = assertThrows(SQLException.class,
                    () -> JdbcFence.inTransaction(c, hold, FenceOptions.defaults().table(missing), tx -> {
                        ran.set(true);
                        return null;
                    }));
            assertTrue(e.getMessage().toLowerCase(java.util.Locale.ROOT).contains(missing), e.getMessage());
            assertTrue(c.getAutoCommit());
        }
        assertFalse(ran.get(), "the body never ran");
        assertThrows(SQLException.class, () -> db.queryLong("SELECT count(*) FROM " + missing), "still no table");
        hold.release();
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void createTable_idempotent_defaultAndSchemaQualified_andANamedFence(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        JdbcFence.createTable(db.dataSource());
        JdbcFence.createTable(db.dataSource()); // IF NOT EXISTS
        try (Connection c = db.connect()) {
            JdbcFence.createTable(c);
        }
        String schema;
        switch (kind) {
            case POSTGRES:
                schema = TestDatabase.unique("inv");
                db.exec("CREATE SCHEMA " + schema);
                break;
            case MARIADB:
                schema = TestDatabase.unique("inv");
                db.exec("CREATE DATABASE " + schema);
                break;
            default:
                schema = "main";
        }
        FenceOptions qualified = FenceOptions.defaults().table(schema + "." + TestDatabase.unique("fences"))
                .name(TestDatabase.unique("sku"));
        JdbcFence.createTable(db.dataSource(), qualified);
        JdbcFence.createTable(db.dataSource(), qualified);

        Hold[] holds = oldAndNew();
        for (FenceOptions options : new FenceOptions[] {FenceOptions.defaults(), qualified}) {
            JdbcFence.inTransaction(db.dataSource(), holds[1], options, c -> {
                shop.sell(c, shop.qty(c), "newer");
                return null;
            });
            assertThrows(StaleTokenException.class, () -> JdbcFence.inTransaction(db.dataSource(), holds[0], options,
                    c -> fail("the body of a stale hold")));
        }
        assertEquals(holds[1].token(), db.queryLong("SELECT token FROM lock_fences WHERE name = ?", holds[1].key()),
                "lock_fences, the fence named by the hold's key");
        assertEquals(1, db.queryLong("SELECT count(*) FROM " + qualified.table()), "the named fence, alone in its table");
        assertEquals(98, shop.qty(db));
        holds[1].release();
    }
}
