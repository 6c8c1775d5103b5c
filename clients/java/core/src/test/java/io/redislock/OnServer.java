package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

/** A test on a fresh server with the module, and a {@link RedisLocks} on it, per test. */
abstract class OnServer {
    TestServer server;
    RedisLocks locks;

    @BeforeEach
    void startServer() throws Exception {
        server = new TestServer();
        locks = RedisLocks.create(server.client);
    }

    @AfterEach
    void stopServer() {
        locks.close();
        server.close();
    }

    /** A waiter on {@code key} left the queue: once {@code held} is released, nobody holds it. */
    void assertLeftTheQueueAndNeverGranted(String key, Hold held) throws InterruptedException {
        assertTrue(TestServer.eventually(() -> server.waiters(key) == 0, 3000),
                "the waiter left the queue");
        assertTrue(held.release());
        Thread.sleep(100);
        assertNull(server.info(key), "nobody was granted the lock");
    }

    /** The holds were released: no renewal reaches the server for 600 ms, and {@code key} is free. */
    void assertNoRenewalAfterwards(String key) throws InterruptedException {
        long after = server.calls("lock.extend");
        Thread.sleep(600);
        assertEquals(after, server.calls("lock.extend"), "no renewal after release");
        assertNull(server.info(key));
    }
}
