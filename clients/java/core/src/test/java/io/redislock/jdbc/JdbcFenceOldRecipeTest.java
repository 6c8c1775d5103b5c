package io.redislock.jdbc;

import static org.junit.jupiter.api.Assertions.*;

import io.redislock.Hold;
import io.redislock.jdbc.TestDatabase.Kind;
import java.sql.Connection;
import java.time.Duration;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The schedule of docs/fencing.md with the recipe that loses an update ({@code UPDATE ... SET qty
 * = :read - 1, fence = :t WHERE ... AND fence <= :t}, reads outside any fence): both writes pass
 * their token check and two units are sold from one. This is what the fence table is for.
 */
class JdbcFenceOldRecipeTest extends WithRedis {
    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void theOldRecipeSellsTwoUnitsFromOne(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        String key = TestDatabase.unique("sku") + ":lock";
        try (Connection ca = db.connect(); Connection cb = db.connect()) {
            Hold a = locks.acquire(key, Duration.ZERO, FenceSchedules.A_LEASE);
            int aRead = shop.qty(ca);                                     // A reads 100, then pauses
            Hold b = locks.acquire(key, Duration.ofSeconds(10), FenceSchedules.B_LEASE); // A's lease ends
            assertTrue(b.token() > a.token(), "tB > tA");
            int bRead = shop.qty(cb);                                     // B reads 100
            assertEquals(1, shop.oldRecipeSell(ca, aRead, a.token(), "A"), "A wakes and writes: fence 0 <= tA");
            assertEquals(1, shop.oldRecipeSell(cb, bRead, b.token(), "B"), "B writes: tA <= tB");
            b.release();
        }
        assertEquals(99, shop.qty(db), "99 left");
        assertEquals(2, shop.sales(db), "two sales: 100 in stock, 101 sold");
    }
}
