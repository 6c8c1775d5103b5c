package io.redislock.jdbc;

import io.redislock.jdbc.TestDatabase.Kind;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A holder paused inside its {@link JdbcFence} transaction past its lease: the next holder waits
 * for the fence row, then reads what the paused one committed. Two sales, the stock adds up.
 */
class JdbcFencePausedInsideTest extends WithRedis {
    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void theNextHolderWaitsForTheFenceRowAndReadsTheCommit(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        FenceSchedules.aHolderPausedInsideItsTransaction(locks, db, shop,
                (hold, body) -> JdbcFence.inTransaction(db.dataSource(), hold, shop.options, body));
    }
}
