package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Each rule of docs/clients.md, against a real server with the module started per test. */
class LocksTest extends OnServer {
    RedisLocks other;

    @BeforeEach
    void startOther() {
        other = RedisLocks.create(server.client);
    }

    @AfterEach
    void stopOther() {
        other.close();
    }

    static CompletableFuture<Boolean> inThread(Callable c) {
        CompletableFuture<Boolean> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                f.complete(c.call());
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        });
        t.setDaemon(true);
        t.start();
        return f;
    }

    interface Callable {
        boolean call() throws Exception;
    }

    @Test
    void rule1_eachLockHasAFreshOwnerUnlessGiven() {
        RedisLock a = locks.lock("k");
        RedisLock b = locks.lock("k");
        assertNotEquals(a.owner(), b.owner());
        assertTrue(a.tryLock());
        assertFalse(b.tryLock(), "two lock objects never share a hold");
        a.unlock();
        Hold h = locks.tryAcquire("j", LockOptions.defaults().owner("worker-7"));
        assertEquals("worker-7", h.owner());
        assertEquals("worker-7", server.info("j").get("owner"));
        h.release();
    }

    @Test
    void rule2_aWaitIsOneBlockingCallInTheServersQueue() throws Exception {
        Hold held = locks.acquire("k", Duration.ZERO);
        long before = server.calls("lock.acquire");
        RedisLock waiter = other.lock("k");
        CompletableFuture<Boolean> got = inThread(() -> {
            boolean ok = waiter.tryLock(5, TimeUnit.SECONDS);
            waiter.unlock();
            return ok;
        });
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        Thread.sleep(300);
        assertTrue(held.release());
        assertTrue(got.get(5, TimeUnit.SECONDS));
        assertEquals(1, server.calls("lock.acquire") - before, "one LOCK.ACQUIRE ... WAIT, never polling");
    }

    @Test
    void rule2_theClientsOwnCommandTimeoutNeverCutsAWaitShort() throws Exception {
        // Command timeouts on, at the connection's timeout (Spring Boot's spring.data.redis.timeout).
        RedisClient c = RedisClient.create(RedisURI.builder().withHost("127.0.0.1").withPort(server.port)
                .withTimeout(Duration.ofMillis(300)).build());
        c.setOptions(ClientOptions.builder().timeoutOptions(TimeoutOptions.enabled()).build());
        RedisLocks short_ = RedisLocks.create(c);
        try {
            Hold held = locks.acquire("k", Duration.ZERO);
            long before = server.calls("lock.acquire");
            CompletableFuture<Boolean> got = inThread(() -> {
                try (Hold h = short_.acquire("k", Duration.ofSeconds(5))) {
                    return h.token() > 0;
                }
            });
            assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000), "the wait is queued");
            Thread.sleep(900); // three of the client's 300 ms command timeouts
            assertEquals(1, server.waiters("k"), "still the same wait, not cut short");
            held.release();
            assertTrue(got.get(5, TimeUnit.SECONDS));
            assertEquals(1, server.calls("lock.acquire") - before);
        } finally {
            short_.close();
            c.shutdown();
        }
    }

    @Test
    void theWaitTime_acquireThrowsNotAcquired_tryLockAnswersFalse() throws Exception {
        locks.acquire("k", Duration.ZERO);
        long t0 = System.nanoTime();
        assertThrows(NotAcquiredException.class, () -> other.acquire("k", Duration.ofMillis(200)));
        assertTrue(System.nanoTime() - t0 >= 190_000_000L);
        assertFalse(other.lock("k").tryLock(100, TimeUnit.MILLISECONDS));
        assertFalse(other.lock("k").tryLock());
        assertEquals(0, server.waiters("k"));
    }

    @Test
    void aWaitOfCenturiesIsAWaitWithoutLimit() throws Exception {
        RedisLock l = locks.lock("k");
        assertTrue(l.tryLock(Long.MAX_VALUE, TimeUnit.NANOSECONDS), "292 years: no overflow");
        l.unlock();
        Hold held = locks.acquire("k", Duration.ZERO);
        CompletableFuture<Boolean> got = inThread(() -> {
            try (Hold h = other.acquire("k", Duration.ofDays(1_000_000))) {
                return h.token() > held.token();
            }
        });
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        held.release();
        assertTrue(got.get(5, TimeUnit.SECONDS));
    }

    @Test
    void rule3_anInterruptedWaitLeavesTheQueueAndIsNeverGranted() throws Exception {
        Hold held = locks.acquire("k", Duration.ZERO);
        RedisLock waiter = other.lock("k");
        AtomicReference<Thread> thread = new AtomicReference<>();
        CompletableFuture<Boolean> got = inThread(() -> {
            thread.set(Thread.currentThread());
            waiter.lockInterruptibly();
            return true;
        });
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        thread.get().interrupt();
        ExecutionException e = assertThrows(ExecutionException.class, () -> got.get(5, TimeUnit.SECONDS));
        assertInstanceOf(InterruptedException.class, e.getCause());
        assertLeftTheQueueAndNeverGranted("k", held);
    }

    @Test
    void rule3_lockIgnoresInterruptsButKeepsTheFlag() throws Exception {
        Hold held = locks.acquire("k", Duration.ZERO);
        RedisLock waiter = other.lock("k");
        AtomicReference<Thread> thread = new AtomicReference<>();
        CompletableFuture<Boolean> got = inThread(() -> {
            thread.set(Thread.currentThread());
            waiter.lock();
            boolean flag = Thread.currentThread().isInterrupted();
            waiter.unlock();
            return flag;
        });
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        thread.get().interrupt();
        Thread.sleep(200);
        assertEquals(1, server.waiters("k"));
        held.release();
        assertTrue(got.get(5, TimeUnit.SECONDS), "interrupt status restored");
    }

    @Test
    void rule4_aConnectionErrorWhileWaitingIsRetriedWithTheSameOwner() throws Exception {
        Hold held = locks.acquire("k", Duration.ZERO);
        RedisLock waiter = other.lock("k");
        CompletableFuture<Boolean> got = inThread(() -> {
            boolean ok = waiter.tryLock(10, TimeUnit.SECONDS);
            waiter.unlock();
            return ok;
        });
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        assertEquals(1L, server.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") instanceof Long ? 1L : 1L);
        Thread.sleep(300);
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 5000), "the waiter asked again");
        held.release();
        assertTrue(got.get(10, TimeUnit.SECONDS));
    }

    @Test
    void rule4_theHolderAskingAgainGetsTheSameToken() {
        LockOptions o = LockOptions.defaults().owner("w").watchdog(false);
        Hold a = locks.tryAcquire("k", o);
        Hold b = locks.tryAcquire("k", o);
        assertEquals(a.token(), b.token());
    }

    @Test
    void rule5_guardWritesOnlyWhileHeld_staleAsStaleTokenException() throws Exception {
        server.cmd("SET", "stock", "10");
        Hold h = locks.acquire("k", Duration.ZERO);
        assertEquals(9L, h.guard("DECRBY", "stock", "1"));
        assertEquals("OK", h.guard("SET", "x", "1"));
        assertEquals(h.token(), server.cmd("LOCK.FENCE", "k"));
        assertTrue(h.release());
        assertThrows(StaleTokenException.class, () -> h.guard("DECRBY", "stock", "1"));
        assertEquals("9", server.cmd("GET", "stock"), "nothing was run");
        RedisLock l = locks.lock("k");
        l.lock();
        assertEquals(l.token(), server.cmd("LOCK.FENCE", "k"));
        assertEquals(8L, l.guard("DECRBY", "stock", "1"));
        l.unlock();
    }

    @Test
    void rule6_theWatchdogKeepsAHoldPastSeveralLeases() throws Exception {
        // A 1.5 s lease renewed every 500 ms: a renewal may come up to 1 s late before the lease ends.
        long ttlMs = 1500;
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(ttlMs)));
        // Held all along, sampled over more than two leases: without renewals it would end at 1.5 s.
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(2 * ttlMs + 500);
        while (System.nanoTime() < end) {
            assertEquals(h.token(), server.cmd("LOCK.FENCE", "k"), "still held");
            Thread.sleep(100);
        }
        assertEquals(h.token(), server.cmd("LOCK.FENCE", "k"));
        assertFalse(h.isLost());
        assertTrue(server.calls("lock.extend") >= 1, "renewed by LOCK.EXTEND");
        String list = String.valueOf(server.cmd("CLIENT", "LIST"));
        assertTrue(list.lines().anyMatch(l -> l.contains("cmd=lock.extend")), "on a connection of its own");
        assertTrue(h.release());
    }

    @Test
    void rule6_aWaiterWhoseWaitOutlastsItsTtlIsNotLostOnGrant() throws Exception {
        Hold held = locks.acquire("k", Duration.ZERO);
        List<String> reasons = new CopyOnWriteArrayList<>();
        // The waiter's lease: 1.5 s, renewed every 500 ms (a renewal may come up to 1 s late).
        long ttlMs = 1500;
        CompletableFuture<Boolean> got = inThread(() -> {
            try (Hold h = other.acquire("k", Duration.ofSeconds(10),
                    LockOptions.defaults().ttl(Duration.ofMillis(ttlMs)).onLost((x, r) -> reasons.add(r)))) {
                long renewals = server.calls("lock.extend");
                // Held until the watchdog renewed the lease that started at the grant.
                boolean renewed = TestServer.eventually(() -> server.calls("lock.extend") > renewals, 5000);
                return renewed && !h.isLost() && Long.valueOf(h.token()).equals(server.cmd("LOCK.FENCE", "k"));
            }
        });
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        Thread.sleep(ttlMs + 300); // the wait outlasts the waiter's ttl: its lease starts at the grant
        held.release();
        assertTrue(got.get(10, TimeUnit.SECONDS), String.valueOf(reasons));
        assertTrue(reasons.isEmpty());
    }

    @Test
    void rule7_releaseStopsTheWatchdogInTheSameStep() throws Exception {
        for (int i = 0; i < 5; i++) {
            // A 1.5 s lease: still live at each release even if the renewal (at 500 ms) comes late.
            Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(1500)));
            Thread.sleep(440 + i * 40); // from before the first renewal to just after it
            assertTrue(h.release());
        }
        assertNoRenewalAfterwards("k");
    }

    @Test
    void rule8_lostWithinOneRenewalPeriodAfterForceRelease_once_withAReason() throws Exception {
        List<String> reasons = new CopyOnWriteArrayList<>();
        long ttlMs = 3000; // renewed every 1 s
        RedisLock l = locks.lock("k", LockOptions.defaults().ttl(Duration.ofMillis(ttlMs)).onLost((h, r) -> reasons.add(r)));
        l.lock();
        assertFalse(l.isLost());
        long t0 = System.nanoTime();
        server.cmd("LOCK.FORCERELEASE", "k");
        assertTrue(TestServer.eventually(() -> !reasons.isEmpty(), ttlMs + 2000));
        long tookMs = (System.nanoTime() - t0) / 1_000_000;
        // Told by the next renewal (within 1 s), before the lease would have ended (3 s): the 1.5 s
        // between them is the margin for a late renewal on a loaded machine.
        assertTrue(tookMs < ttlMs - 500, "lost after " + tookMs + " ms");
        assertEquals("the lease ran out before it was renewed", reasons.get(0));
        Thread.sleep(500);
        assertEquals(1, reasons.size(), "once");
        assertTrue(l.isLost());
        assertTrue(l.hold().lostReason().isPresent());
        assertThrows(StaleTokenException.class, () -> l.guard("SET", "x", "1"));
        assertThrows(LockLostException.class, l::lock, "the next call on the lock throws");
        assertThrows(LockLostException.class, l::unlock);
        assertThrows(IllegalMonitorStateException.class, l::unlock);
        assertFalse(l.isHeldByCurrentThread());
    }

    @Test
    void rule8_aWatchdogThatCannotReachTheServerLosesTheHoldWhenTheLeaseEnds() throws Exception {
        List<String> reasons = new CopyOnWriteArrayList<>();
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(600)).onLost((x, r) -> reasons.add(r)));
        new ProcessBuilder("kill", "-STOP", String.valueOf(server.process.pid())).start().waitFor();
        try {
            assertTrue(TestServer.eventually(() -> !reasons.isEmpty(), 3000));
        } finally {
            new ProcessBuilder("kill", "-CONT", String.valueOf(server.process.pid())).start().waitFor();
        }
        assertTrue(reasons.get(0).contains("before the lease ended"), reasons.get(0));
        assertThrows(LockLostException.class, h::close);
    }

    @Test
    void extend_setsTheLeaseFromNow_andTheWatchdogGoesOnRenewingByIt() throws Exception {
        Hold fixed = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofSeconds(30)).watchdog(false));
        assertTrue(fixed.extend(Duration.ofMillis(400)), "shorter than before");
        assertTrue((Long) server.info("k").get("ttl") <= 400);
        Thread.sleep(600);
        assertNull(server.info("k"), "a fixed lease ends at the extended end");
        assertFalse(fixed.extend(Duration.ofSeconds(1)));
        assertTrue(fixed.isLost());

        Hold h = locks.acquire("j", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(300)));
        assertEquals(Duration.ofMillis(300), h.ttl());
        assertTrue(h.extend(Duration.ofSeconds(20)));
        assertEquals(Duration.ofSeconds(20), h.ttl());
        long extends_ = server.calls("lock.extend");
        Thread.sleep(800);
        assertTrue(server.calls("lock.extend") - extends_ <= 1, "renewals every 20 s / 3 now, not every 100 ms");
        assertTrue((Long) server.info("j").get("ttl") > 18_000);
        assertTrue(h.release());
        assertFalse(h.extend(Duration.ofSeconds(1)), "released");
    }

    @Test
    void extend_ofAForceReleasedHoldAnswersFalse_lostOnce() throws Exception {
        List<String> reasons = new CopyOnWriteArrayList<>();
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofSeconds(30)).onLost((x, r) -> reasons.add(r)));
        server.cmd("LOCK.FORCERELEASE", "k");
        assertFalse(h.extend(Duration.ofSeconds(30)));
        assertFalse(h.extend(Duration.ofSeconds(30)));
        assertEquals(1, reasons.size(), String.valueOf(reasons));
        assertThrows(LockLostException.class, h::close);
    }

    @Test
    void aPerCallTtl_isTheLeaseOfThatHold() throws Exception {
        RedisLock l = locks.lock("k", LockOptions.defaults().ttl(Duration.ofSeconds(30)).watchdog(false));
        l.lock(Duration.ofMillis(5000));
        long ttl = (Long) server.info("k").get("ttl");
        assertTrue(ttl > 4000 && ttl <= 5000, String.valueOf(ttl));
        assertTrue(l.tryLock(Duration.ZERO, Duration.ofSeconds(60)), "a re-entry");
        assertTrue((Long) server.info("k").get("ttl") <= 5000, "keeps the hold's lease");
        assertTrue(l.isHeldByAnyThread());
        assertFalse(inThread(l::isHeldByCurrentThread).get(5, TimeUnit.SECONDS));
        assertTrue(inThread(l::isHeldByAnyThread).get(5, TimeUnit.SECONDS));
        l.unlock();
        l.unlock();
        assertFalse(l.isHeldByAnyThread());
        assertTrue(l.tryLock(Duration.ofSeconds(1), Duration.ofMillis(2000)));
        assertTrue((Long) server.info("k").get("ttl") <= 2000);
        l.unlock();
        assertThrows(IllegalArgumentException.class, () -> l.lock(Duration.ZERO));
    }

    @Test
    void aFixedLeaseEndsWithItsTtl_releaseAnswersFalse() throws Exception {
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(200)).watchdog(false));
        Thread.sleep(400);
        assertNull(server.info("k"));
        assertEquals(0, server.calls("lock.extend"));
        assertFalse(h.release());
        assertTrue(h.isLost());
    }

    @Test
    void tryWithResourcesReleases_alsoOnAThrownError() throws Exception {
        try (Hold h = locks.acquire("k", Duration.ofSeconds(1))) {
            assertEquals(h.token(), server.cmd("LOCK.FENCE", "k"));
        }
        assertNull(server.info("k"));
        assertThrows(IllegalStateException.class, () -> {
            try (Hold h = locks.acquire("k", Duration.ofSeconds(1))) {
                throw new IllegalStateException("work failed");
            }
        });
        assertNull(server.info("k"));
        LockLostException lost = assertThrows(LockLostException.class, () -> {
            try (Hold h = locks.acquire("k", Duration.ofSeconds(1))) {
                server.cmd("LOCK.FORCERELEASE", "k");
            }
        });
        assertNotNull(lost.getMessage());
    }

    @Test
    void rule10_reentrantByTheOwningThread_oneServerHold() throws Exception {
        RedisLock l = locks.lock("k");
        l.lock();
        long token = l.token();
        assertTrue(l.tryLock());
        assertTrue(l.tryLock(1, TimeUnit.SECONDS));
        assertEquals(3, l.getHoldCount());
        assertEquals(1L, server.info("k").get("permits"));
        assertEquals(token, l.token());
        l.unlock();
        l.unlock();
        assertEquals(token, server.cmd("LOCK.FENCE", "k"), "only the outermost unlock releases");
        l.unlock();
        assertNull(server.info("k"));
        assertThrows(IllegalMonitorStateException.class, l::unlock);
    }

    @Test
    void unlockByAnotherThreadThrowsIllegalMonitorState() throws Exception {
        RedisLock l = locks.lock("k");
        l.lock();
        CompletableFuture<Boolean> f = inThread(() -> {
            assertThrows(IllegalMonitorStateException.class, l::unlock);
            assertThrows(IllegalMonitorStateException.class, l::token);
            return l.tryLock();
        });
        assertFalse(f.get(5, TimeUnit.SECONDS), "another thread of the same object queues like any other owner");
        assertEquals(l.token(), server.cmd("LOCK.FENCE", "k"));
        l.unlock();
        assertThrows(UnsupportedOperationException.class, l::newCondition);
    }

    @Test
    void theWatchdogNeverKeepsTheJvmAlive() throws Exception {
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(300)));
        Thread.sleep(200);
        boolean any = false;
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().startsWith("redis-lock-watchdog")) {
                any = true;
                assertTrue(t.isDaemon());
            }
        }
        assertTrue(any);
        h.release();
    }
}
