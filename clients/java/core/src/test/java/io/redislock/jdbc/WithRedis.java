package io.redislock.jdbc;

import io.redislock.Hold;
import io.redislock.RedisLocks;
import io.redislock.TestServer;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * The tests whose holds are real: one server with the module per test class, and {@link
 * RedisLocks} on it; each test takes locks of its own keys. Public, in the core's test-jar.
 */
public abstract class WithRedis {
    protected static TestServer server;
    protected static RedisLocks locks;

    @BeforeAll
    protected static void startRedis() throws Exception {
        server = new TestServer();
        locks = RedisLocks.create(server.client);
    }

    @AfterAll
    protected static void stopRedis() {
        locks.close();
        server.close();
    }

    /** A hold of a new key, with a lease the watchdog renews. */
    protected static Hold hold() throws InterruptedException {
        return locks.acquire(TestDatabase.unique("k") + ":lock", Duration.ZERO);
    }
}
