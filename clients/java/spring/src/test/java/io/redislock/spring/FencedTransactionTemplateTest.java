package io.redislock.spring;

import static org.junit.jupiter.api.Assertions.*;

import io.redislock.Hold;
import io.redislock.StaleTokenException;
import io.redislock.jdbc.FenceOptions;
import io.redislock.jdbc.FenceSchedules;
import io.redislock.jdbc.Shop;
import io.redislock.jdbc.TestDatabase;
import io.redislock.jdbc.TestDatabase.Kind;
import io.redislock.jdbc.WithRedis;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.springframework.jdbc.core.ConnectionCallback;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.IllegalTransactionStateException;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.DefaultTransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * {@link FencedTransactionTemplate} on a {@link DataSourceTransactionManager}, against real
 * databases and holds: the two schedules of docs/fencing.md (the stale holder gets the stale
 * error, one sale; a holder paused inside its transaction is waited for, two sales), and what it
 * does with Spring's transactions.
 */
class FencedTransactionTemplateTest extends WithRedis {
    /** The template of a shop, and the helper under test of {@link FenceSchedules}: its connection is the transaction's. */
    private static FenceSchedules.Fenced fenced(TestDatabase db, Shop shop) {
        FencedTransactionTemplate template = new FencedTransactionTemplate(new DataSourceTransactionManager(db.dataSource()),
                db.dataSource(), new DefaultTransactionDefinition(), shop.options);
        JdbcTemplate jdbc = new JdbcTemplate(db.dataSource());
        return (hold, body) -> template.execute(hold, status -> jdbc.execute((ConnectionCallback<Integer>) body::apply));
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void aStaleHolderMeetsTheNewerFence_oneSaleAndTheStaleError(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        FenceSchedules.aStaleHolderMeetsTheNewerFence(locks, db, shop, fenced(db, shop));
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void aHolderPausedInsideItsTransactionIsWaitedFor_twoSales(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        FenceSchedules.aHolderPausedInsideItsTransaction(locks, db, shop, fenced(db, shop));
    }

    @Test
    void commitsOrRollsBack_theStaleErrorBeforeTheCallback() throws Exception {
        TestDatabase db = TestDatabase.of(Kind.POSTGRES);
        Shop shop = Shop.open(db, 100);
        DataSourceTransactionManager manager = new DataSourceTransactionManager(db.dataSource());
        FencedTransactionTemplate template = new FencedTransactionTemplate(manager, db.dataSource(),
                new DefaultTransactionDefinition(), shop.options);
        JdbcTemplate jdbc = new JdbcTemplate(db.dataSource());
        String key = TestDatabase.unique("k") + ":lock";
        Hold old = locks.acquire(key, Duration.ZERO);
        assertTrue(old.release());
        Hold newer = locks.acquire(key, Duration.ZERO);

        int left = template.execute(newer, status -> sell(jdbc, shop));
        assertEquals(99, left, "committed, the callback's value returned");
        assertEquals(newer.token(), jdbc.queryForObject("SELECT token FROM " + shop.fences + " WHERE name = ?",
                Long.class, key), "the fence named by the hold's key");

        IllegalStateException thrown = new IllegalStateException("the callback's own");
        assertSame(thrown, assertThrows(IllegalStateException.class, () -> template.execute(newer, status -> {
            sell(jdbc, shop);
            throw thrown;
        })));
        assertEquals(99, shop.qty(db), "rolled back");

        AtomicBoolean ran = new AtomicBoolean();
        StaleTokenException stale = assertThrows(StaleTokenException.class, () -> template.execute(old, status -> {
            ran.set(true);
            return sell(jdbc, shop);
        }));
        assertTrue(stale.getMessage().contains(key) && stale.getMessage().contains(String.valueOf(old.token())),
                stale.getMessage());
        assertFalse(ran.get(), "the callback never ran");
        assertEquals(99, shop.qty(db));
        assertEquals(1, shop.sales(db));
        newer.release();
    }

    private static int sell(JdbcTemplate jdbc, Shop shop) {
        Integer qty = jdbc.queryForObject("SELECT qty FROM " + shop.stock + " WHERE sku = ?", Integer.class, Shop.SKU);
        int left = (qty == null ? 0 : qty) - 1;
        jdbc.update("UPDATE " + shop.stock + " SET qty = ? WHERE sku = ?", left, Shop.SKU);
        jdbc.update("INSERT INTO " + shop.sales + " (sku, seller) VALUES (?, ?)", Shop.SKU, "spring");
        return left;
    }

    @Test
    void aFencedTransactionIsANewOne() throws Exception {
        TestDatabase db = TestDatabase.of(Kind.POSTGRES);
        Shop shop = Shop.open(db, 100);
        DataSourceTransactionManager manager = new DataSourceTransactionManager(db.dataSource());
        JdbcTemplate jdbc = new JdbcTemplate(db.dataSource());
        FencedTransactionTemplate joining = new FencedTransactionTemplate(manager, db.dataSource(),
                new DefaultTransactionDefinition(), shop.options);
        FencedTransactionTemplate apart = new FencedTransactionTemplate(manager, db.dataSource(),
                new DefaultTransactionDefinition(TransactionDefinition.PROPAGATION_REQUIRES_NEW), shop.options);
        Hold hold = hold();
        new TransactionTemplate(manager).executeWithoutResult(outer -> {
            jdbc.update("UPDATE " + shop.stock + " SET qty = 50 WHERE sku = ?", Shop.SKU);
            assertThrows(IllegalTransactionStateException.class, () -> joining.execute(hold, status -> sell(jdbc, shop)));
            assertFalse(outer.isRollbackOnly(), "refused before it joined: the outer transaction goes on");
            jdbc.update("UPDATE " + shop.stock + " SET qty = 100 WHERE sku = ?", Shop.SKU);
        });
        assertEquals(100, shop.qty(db), "nothing of the refused one ran");
        FencedTransactionTemplate none = new FencedTransactionTemplate(manager, db.dataSource(),
                new DefaultTransactionDefinition(TransactionDefinition.PROPAGATION_SUPPORTS), shop.options);
        assertThrows(IllegalTransactionStateException.class, () -> none.execute(hold, status -> sell(jdbc, shop)),
                "SUPPORTS outside a transaction: no transaction at all");
        assertEquals(100, shop.qty(db));
        new TransactionTemplate(manager).executeWithoutResult(outer -> {
            jdbc.queryForObject("SELECT 1", Integer.class);
            int left = apart.execute(hold, status -> sell(jdbc, shop));
            assertEquals(99, left);
        });
        assertEquals(99, shop.qty(db), "REQUIRES_NEW: a transaction of its own, committed");

        FencedTransactionTemplate elsewhere = new FencedTransactionTemplate(
                new DataSourceTransactionManager(TestDatabase.of(Kind.SQLITE).dataSource()), db.dataSource(),
                new DefaultTransactionDefinition(), FenceOptions.defaults());
        assertThrows(IllegalStateException.class, () -> elsewhere.execute(hold, status -> sell(jdbc, shop)),
                "a DataSource the manager does not manage");
        assertEquals(99, shop.qty(db));
        hold.release();
    }
}
