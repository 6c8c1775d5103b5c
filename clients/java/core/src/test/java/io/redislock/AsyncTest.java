package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** acquireAsync: a CompletionStage next to the blocking API, with the same rules. */
class AsyncTest {
    TestServer server;
    RedisLocks locks;

    @BeforeEach
    void start() throws Exception {
        server = new TestServer();
        locks = RedisLocks.create(server.client);
    }

    @AfterEach
    void stop() {
        locks.close();
        server.close();
    }

    @Test
    void grantedAtOnceOrAfterAWaitInTheQueue() throws Exception {
        Hold first = locks.acquireAsync("k", Duration.ZERO, LockOptions.defaults()).get(5, TimeUnit.SECONDS);
        assertEquals(first.token(), server.cmd("LOCK.FENCE", "k"));
        CompletableFuture<Hold> second = locks.acquireAsync("k", Duration.ofSeconds(5), LockOptions.defaults());
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        assertFalse(second.isDone());
        assertTrue(first.release());
        Hold h = second.get(5, TimeUnit.SECONDS);
        assertTrue(h.token() > first.token());
        assertTrue(h.release());
    }

    @Test
    void notGrantedInTimeCompletesWithNotAcquired() throws Exception {
        Hold first = locks.acquire("k", Duration.ZERO);
        ExecutionException e = assertThrows(ExecutionException.class,
                () -> locks.acquireAsync("k", Duration.ofMillis(200), LockOptions.defaults()).get(5, TimeUnit.SECONDS));
        assertInstanceOf(NotAcquiredException.class, e.getCause());
        assertEquals(0, server.waiters("k"));
        first.release();
    }

    @Test
    void cancellingAWaitLeavesTheQueueAndIsNeverGranted() throws Exception {
        Hold first = locks.acquire("k", Duration.ZERO);
        CompletableFuture<Hold> waiting = locks.acquireAsync("k", Duration.ofSeconds(10), LockOptions.defaults());
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        assertTrue(waiting.cancel(true));
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 0, 3000), "left the queue");
        assertTrue(first.release());
        Thread.sleep(100);
        assertNull(server.info("k"), "nobody was granted");
    }
}
