package io.redislock.jdbc;

import io.redislock.jdbc.TestDatabase.Kind;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** The schedule of docs/fencing.md through {@link JdbcFence}: the stale holder gets the stale error, one sale. */
class JdbcFenceScheduleTest extends WithRedis {
    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void aStaleHolderMeetsTheNewerFence_oneSaleAndTheStaleError(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        FenceSchedules.aStaleHolderMeetsTheNewerFence(locks, db, shop,
                (hold, body) -> JdbcFence.inTransaction(db.dataSource(), hold, shop.options, body));
    }
}
