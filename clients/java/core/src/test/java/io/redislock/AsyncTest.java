package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** acquireAsync and releaseAsync: futures next to the blocking API, with the same rules. */
class AsyncTest extends OnServer {
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
        assertLeftTheQueueAndNeverGranted("k", first);
    }

    @Test
    void aFutureTimedOutByTheCallerLeavesTheQueueAndIsNeverGranted() throws Exception {
        Hold first = locks.acquire("k", Duration.ZERO);
        CompletableFuture<Hold> waiting = locks.acquireAsync("k", Duration.ofSeconds(10), LockOptions.defaults())
                .orTimeout(300, TimeUnit.MILLISECONDS); // the same future, completed with a TimeoutException
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        ExecutionException e = assertThrows(ExecutionException.class, () -> waiting.get(5, TimeUnit.SECONDS));
        assertInstanceOf(java.util.concurrent.TimeoutException.class, e.getCause());
        assertLeftTheQueueAndNeverGranted("k", first);
    }

    @Test
    void closingRedisLocksEndsAWaitInFlight() throws Exception {
        Hold first = locks.acquire("k", Duration.ZERO);
        RedisLocks other = RedisLocks.create(server.client);
        CompletableFuture<Hold> waiting = other.acquireAsync("k", Duration.ofSeconds(10), LockOptions.defaults());
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        other.close();
        assertTrue(TestServer.eventually(waiting::isDone, 3000), "the wait ends with its RedisLocks");
        assertThrows(ExecutionException.class, () -> waiting.get(1, TimeUnit.SECONDS));
        assertLeftTheQueueAndNeverGranted("k", first);
    }

    @Test
    void aSessionHoldTakenAfterAWaitEndsWithItsConnection() throws Exception {
        Hold first = locks.acquire("k", Duration.ZERO);
        CompletableFuture<Hold> waiting = locks.acquireAsync("k", Duration.ofSeconds(5), LockOptions.defaults().session());
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        assertTrue(first.releaseAsync().get(5, TimeUnit.SECONDS));
        Hold s = waiting.get(5, TimeUnit.SECONDS);
        Object id = holderField("k", "session");
        assertNotNull(id, "bound to the connection that waited");
        server.cmd("CLIENT", "KILL", "ID", id);
        assertTrue(TestServer.eventually(() -> server.info("k") == null, 2000), "released with its connection");
        assertFalse(s.releaseAsync().get(5, TimeUnit.SECONDS));
        assertTrue(s.isLost());
    }

    @Test
    void aDurableGrantCompletesOnlyWithItsReplicas() throws Exception {
        LockOptions durable = LockOptions.defaults().replicas(1, Duration.ofMillis(200));
        ExecutionException e = assertThrows(ExecutionException.class,
                () -> locks.acquireAsync("k", Duration.ofSeconds(1), durable).get(5, TimeUnit.SECONDS));
        assertInstanceOf(NotAcquiredException.class, e.getCause());
        assertNull(server.info("k"), "released again");
        try (TestServer replica = new TestServer("--replicaof", "127.0.0.1", String.valueOf(server.port))) {
            assertTrue(TestServer.eventually(() -> String.valueOf(replica.cmd("INFO", "replication")).contains("master_link_status:up"), 10_000));
            Hold h = locks.acquireAsync("k", Duration.ZERO, durable.replicas(1, Duration.ofSeconds(2))).get(5, TimeUnit.SECONDS);
            assertEquals(h.token(), replica.cmd("LOCK.FENCE", "k"), "the replica has the hold");
            assertTrue(h.releaseAsync().get(5, TimeUnit.SECONDS));
        }
    }

    @Test
    void releaseAsyncStopsTheWatchdogInTheCallAndAnswersOnce() throws Exception {
        for (int i = 0; i < 5; i++) {
            // A 1.5 s lease: still live at each release even if the renewal (at 500 ms) comes late.
            Hold h = locks.acquireAsync("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(1500)))
                    .get(5, TimeUnit.SECONDS);
            Thread.sleep(440 + i * 40); // from before the first renewal to just after it
            CompletableFuture<Boolean> released = h.releaseAsync();
            assertFalse(h.releaseAsync().get(5, TimeUnit.SECONDS), "a second release answers false");
            assertTrue(released.get(5, TimeUnit.SECONDS));
        }
        assertNoRenewalAfterwards("k");
    }

    @Test
    void aSemaphoreLeaseAsynchronously() throws Exception {
        RedisSemaphore pool = locks.semaphore("pool", 2);
        Hold a = pool.acquireAsync(2, Duration.ZERO).get(5, TimeUnit.SECONDS);
        CompletableFuture<Hold> b = pool.acquireAsync(1, Duration.ofSeconds(5));
        assertTrue(TestServer.eventually(() -> server.waiters("pool") == 1, 3000));
        assertTrue(a.releaseAsync().get(5, TimeUnit.SECONDS));
        assertTrue(b.get(5, TimeUnit.SECONDS).releaseAsync().get(5, TimeUnit.SECONDS));
    }

    @SuppressWarnings("unchecked")
    private Object holderField(String key, String field) {
        List<Object> holder = (List<Object>) ((List<Object>) server.info(key).get("holders")).get(0);
        int i = holder.indexOf(field);
        return i < 0 ? null : holder.get(i + 1);
    }
}
