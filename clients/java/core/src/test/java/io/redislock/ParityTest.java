package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

/**
 * The "Same case, same answer" table of docs/clients.md (rules 16, 17), one test per row; what
 * the server was sent is read from its INFO commandstats and SLOWLOG, not from wall time.
 */
class ParityTest extends OnServer {
    List<String> reasons = new CopyOnWriteArrayList<>();

    /** A hold whose lease the server ended (LOCK.FORCERELEASE) and whose watchdog saw it: lost. */
    Hold lostHold() throws Exception {
        // A 600 ms lease renewed every 200 ms: the next renewal answers 0.
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(600)).onLost((x, r) -> reasons.add(r)));
        server.cmd("LOCK.FORCERELEASE", "k");
        assertTrue(TestServer.eventually(h::isLost, 3000));
        return h;
    }

    @Test
    void aReleaseThatFindsTheLeaseGone_answersFalse_andMarksTheHoldLost() throws Exception {
        Hold h = locks.acquire("k", Duration.ZERO,
                LockOptions.defaults().ttl(Duration.ofSeconds(30)).watchdog(false).onLost((x, r) -> reasons.add(r)));
        server.cmd("LOCK.FORCERELEASE", "k");
        assertFalse(h.isLost(), "not known yet");
        assertFalse(h.release());
        assertTrue(h.isLost());
        assertEquals(1, reasons.size(), "the lost signal fired");
        assertEquals("the hold was gone when released (its lease ran out)", reasons.get(0));
    }

    @Test
    void aReleaseOfAHoldKnownLost_answersFalse_andSendsNothing() throws Exception {
        Hold h = lostHold();
        long releases = server.calls("lock.release");
        assertFalse(h.release());
        assertEquals(releases, server.calls("lock.release"), "no LOCK.RELEASE sent");
        Hold scoped = lostHold();
        assertThrows(LockLostException.class, scoped::close, "leaving its scope reports the loss");
        assertEquals(releases, server.calls("lock.release"), "no LOCK.RELEASE sent");
        assertEquals(2, reasons.size(), "each lost once");
    }

    @Test
    void aGuardedWriteOfAHoldKnownLost_isStale_andSendsNothing() throws Exception {
        Hold h = lostHold();
        long guards = server.calls("lock.guard");
        assertThrows(StaleTokenException.class, () -> h.guard("SET", "x", "1"));
        assertEquals(guards, server.calls("lock.guard"), "no LOCK.GUARD sent");
        long extends_ = server.calls("lock.extend");
        assertFalse(h.extend(Duration.ofSeconds(1)), "an extend of it: false");
        assertEquals(extends_, server.calls("lock.extend"), "no LOCK.EXTEND sent");
    }

    @Test
    void releaseTwice_trueThenFalse_theSecondSendsNothing() throws Exception {
        Hold h = locks.acquire("k", Duration.ZERO);
        assertTrue(h.release());
        long releases = server.calls("lock.release");
        assertFalse(h.release());
        assertEquals(releases, server.calls("lock.release"), "no second LOCK.RELEASE");
        long guards = server.calls("lock.guard");
        assertThrows(StaleTokenException.class, () -> h.guard("SET", "x", "1"), "a released hold's write");
        assertEquals(guards, server.calls("lock.guard"));
        assertFalse(h.isLost(), "released, not lost");
    }

    @Test
    void aTtlOfZeroOrUnderOneMs_isIllegalArgumentException_beforeAnythingIsSent() throws Exception {
        long acquires = server.calls("lock.acquire");
        for (Duration ttl : List.of(Duration.ZERO, Duration.ofNanos(999_999), Duration.ofMillis(-5))) {
            assertThrows(IllegalArgumentException.class, () -> LockOptions.defaults().ttl(ttl), ttl.toString());
            assertThrows(IllegalArgumentException.class, () -> locks.lock("k").lock(ttl), ttl.toString());
            assertThrows(IllegalArgumentException.class, () -> locks.lock("k").tryLock(Duration.ZERO, ttl), ttl.toString());
        }
        assertEquals(acquires, server.calls("lock.acquire"), "nothing sent");
        Hold h = locks.acquire("k", Duration.ZERO);
        long extends_ = server.calls("lock.extend");
        assertThrows(IllegalArgumentException.class, () -> h.extend(Duration.ofNanos(500_000)));
        assertEquals(extends_, server.calls("lock.extend"), "nothing sent");
        assertTrue(h.release());
    }

    @Test
    void aTtlOfOnePointFiveMs_isATwoMsLease() throws Exception {
        server.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0"); // every command into the SLOWLOG, with its arguments
        server.cmd("SLOWLOG", "RESET");
        Hold h = locks.tryAcquire("k", LockOptions.defaults().ttl(Duration.ofNanos(1_500_000)).watchdog(false));
        assertNotNull(h);
        assertEquals(Duration.ofMillis(2), h.ttl());
        assertEquals(List.of("LOCK.ACQUIRE", "k", h.owner(), "2"), sent("LOCK.ACQUIRE"), "rounded up, never shorter");
    }

    @Test
    void theDefaultWaitOfTheBlockingAcquire_isWithoutLimit() throws Exception {
        Hold held = locks.acquire("k", Duration.ZERO);
        RedisLocks other = RedisLocks.create(server.client);
        try {
            CompletableFuture<Long> byAcquire = LocksTest.inThread(() -> {
                try (Hold h = other.acquire("k")) {
                    return h.token() > held.token();
                }
            }).thenApply(b -> b ? 1L : 0L);
            RedisLock lock = other.lock("k");
            CompletableFuture<Boolean> byLock = LocksTest.inThread(() -> {
                lock.lock();
                lock.unlock();
                return true;
            });
            assertTrue(TestServer.eventually(() -> server.waiters("k") == 2, 3000), "both queued");
            Thread.sleep(1500); // longer than any client-side default would be cut at here
            assertFalse(byAcquire.isDone() || byLock.isDone(), "still waiting");
            assertTrue(held.release());
            assertEquals(1L, byAcquire.get(10, TimeUnit.SECONDS));
            assertTrue(byLock.get(10, TimeUnit.SECONDS));
        } finally {
            other.close();
        }
    }

    @Test
    void theFormThatTriesOnce_tryLockAndTryAcquire() throws Exception {
        server.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0");
        Hold held = locks.acquire("k", Duration.ZERO);
        server.cmd("SLOWLOG", "RESET");
        assertFalse(locks.lock("k").tryLock());
        assertNull(locks.tryAcquire("k"));
        assertEquals(0, server.waiters("k"), "nobody queued");
        assertFalse(sent("LOCK.ACQUIRE").contains("WAIT"), "sent without WAIT");
        assertTrue(held.release());
        Hold h = locks.tryAcquire("k");
        assertNotNull(h, "free: granted");
        assertTrue(h.release());
    }

    @Test
    void aWaitOfOneMsOrLessOnAFreeLock_isGranted_oneTryIsAlwaysSent() throws Exception {
        RedisLock lock = locks.lock("k");
        assertTrue(lock.tryLock(1, TimeUnit.MILLISECONDS));
        lock.unlock();
        assertTrue(lock.tryLock(500, TimeUnit.MICROSECONDS), "sub-ms: rounded up to 1 ms");
        lock.unlock();
        assertTrue(lock.tryLock(1, TimeUnit.NANOSECONDS));
        lock.unlock();
        for (Duration wait : List.of(Duration.ofMillis(1), Duration.ofNanos(1), Duration.ofNanos(999_999))) {
            assertTrue(locks.acquire("k", wait).release(), wait.toString());
            assertTrue(locks.acquireAsync("k", wait, LockOptions.defaults()).get(10, TimeUnit.SECONDS).release(), wait.toString());
        }
    }

    @Test
    void aFixedLeaseReachesItsEnd_lostThenByTheTimer_releaseAndGuardAnswerWithoutTheServer() throws Exception {
        long ttlMs = 500;
        List<Long> lostAt = new CopyOnWriteArrayList<>();
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(ttlMs)).watchdog(false)
                .onLost((x, r) -> {
                    lostAt.add(System.nanoTime());
                    reasons.add(r);
                }));
        assertTrue(TestServer.eventually(() -> !lostAt.isEmpty(), ttlMs + 3000), "lost");
        long lateMs = (lostAt.get(0) - h.leaseEnd()) / 1_000_000;
        assertTrue(lostAt.get(0) - h.leaseEnd() >= 0, "not before its end");
        assertTrue(lateMs <= ttlMs / 10 + 100, "lost " + lateMs + " ms after its end (rule 15: 10% of the ttl + 100 ms)");
        assertEquals("the lease ended (a fixed lease, not extended in time)", reasons.get(0));
        long releases = server.calls("lock.release");
        long guards = server.calls("lock.guard");
        assertThrows(StaleTokenException.class, () -> h.guard("SET", "x", "1"));
        assertFalse(h.release());
        assertEquals(releases, server.calls("lock.release"), "no LOCK.RELEASE sent");
        assertEquals(guards, server.calls("lock.guard"), "no LOCK.GUARD sent");
    }

    @Test
    void aNegativeWait_tryLockTriesOnce_acquireIsIllegalArgumentException() throws Exception {
        RedisLock lock = locks.lock("k");
        assertTrue(lock.tryLock(-1, TimeUnit.SECONDS), "tryLock(t <= 0): one try, as java.util.concurrent.locks.Lock");
        assertFalse(LocksTest.inThread(() -> lock.tryLock(-1, TimeUnit.SECONDS)).get(5, TimeUnit.SECONDS), "held: false at once");
        lock.unlock();
        long acquires = server.calls("lock.acquire");
        assertThrows(IllegalArgumentException.class, () -> locks.acquire("k", Duration.ofMillis(-1)));
        assertThrows(IllegalArgumentException.class, () -> locks.acquireAsync("k", Duration.ofMillis(-1), LockOptions.defaults()));
        assertEquals(acquires, server.calls("lock.acquire"), "nothing sent");
    }

    @Test
    void rule18_closingTheLocksThenTheClientLogsNothing() throws Exception {
        List<String> logged = new CopyOnWriteArrayList<>();
        Handler handler = new Handler() {
            @Override
            public void publish(LogRecord r) {
                if (r.getLevel().intValue() >= Level.INFO.intValue()) {
                    logged.add(r.getLevel() + " " + r.getLoggerName() + ": " + r.getMessage());
                }
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        Logger root = Logger.getLogger("");
        root.addHandler(handler); // Lettuce logs through Netty to java.util.logging here (no SLF4J binding)
        try {
            for (int i = 0; i < 3; i++) {
                RedisClient client = RedisClient.create(io.lettuce.core.RedisURI.create("127.0.0.1", server.port));
                RedisLocks l = RedisLocks.create(client);
                l.acquire("k" + i, Duration.ZERO); // a hold left to its lease: its watchdog link open
                try (Hold h = l.acquire("j" + i, Duration.ofSeconds(1))) { // a wait link, idle after
                    h.token();
                }
                l.close();
                client.shutdown();
            }
        } finally {
            root.removeHandler(handler);
        }
        assertEquals(List.of(), logged);
    }

    @Test
    void extendOfALiveHold_true_theLeaseEndsTtlFromNow_theWatchdogRenewsByIt() throws Exception {
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofSeconds(30)));
        assertTrue(h.extend(Duration.ofMillis(1500)), "shorter than before");
        assertEquals(Duration.ofMillis(1500), h.ttl());
        assertTrue((Long) server.info("k").get("ttl") <= 1500, "the lease ends 1.5 s from now");
        // Past the extended lease's end (1.5 s, renewed every 500 ms): the watchdog renews by 1.5 s.
        Thread.sleep(2000);
        assertFalse(h.isLost());
        assertTrue((Long) server.info("k").get("ttl") <= 1500, "renewed by the extended ttl, not the 30 s");
        assertTrue(h.extend(), "by default the hold's ttl");
        assertTrue(h.release());
    }

    @Test
    void extendAnsweredZero_false_lostOnce_theLeaseRanOut() throws Exception {
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().onLost((x, r) -> reasons.add(r)));
        server.cmd("LOCK.FORCERELEASE", "k");
        assertFalse(h.extend(Duration.ofSeconds(30)));
        assertTrue(h.isLost());
        assertEquals(List.of("the lease ran out before it was renewed"), reasons);
        assertFalse(h.extend(Duration.ofSeconds(30)), "known lost now");
        assertEquals(1, reasons.size(), "reported once");
    }

    @Test
    void extendOfAHoldKnownLostOrReleased_false_nothingSent() throws Exception {
        Hold released = locks.acquire("r", Duration.ZERO, LockOptions.defaults().watchdog(false));
        assertTrue(released.release());
        Hold lost = lostHold();
        long extends_ = server.calls("lock.extend");
        assertFalse(released.extend(Duration.ofSeconds(1)), "released");
        assertFalse(lost.extend(Duration.ofSeconds(1)), "lost");
        assertFalse(lost.extend(), "lost");
        assertEquals(extends_, server.calls("lock.extend"), "no LOCK.EXTEND sent");
    }

    /**
     * Rule 19: the server is a replica (REPLICAOF another server), so LOCK.ACQUIRE answers
     * READONLY; promoted before the caller's deadline, it grants the same owner.
     */
    @Test
    void aRetryableReplyToAnAcquire_isAskedAgainWithTheSameOwner_untilTheDeadline() throws Exception {
        try (TestServer master = new TestServer()) {
            server.cmd("REPLICAOF", "127.0.0.1", master.port);
            RuntimeException readOnly = assertThrows(RuntimeException.class, () -> server.cmd("LOCK.ACQUIRE", "probe", "x", "1000"));
            assertTrue(readOnly.getMessage().startsWith("READONLY"), readOnly.getMessage());
            LockOptions mine = LockOptions.defaults().owner("worker-19");
            CompletableFuture<Hold> f = locks.acquireAsync("k", Duration.ofSeconds(20), mine);
            Thread.sleep(500); // refused as READONLY, and asked again, meanwhile
            assertFalse(f.isDone(), "still asking");
            server.cmd("REPLICAOF", "NO", "ONE");
            Hold h = f.get(20, TimeUnit.SECONDS);
            assertEquals("worker-19", h.owner());
            assertEquals("worker-19", server.info("k").get("owner"), "granted to the same owner");
            assertTrue(h.release());
        }
    }

    /** A renewal refused by the server (NOPERM: lock.extend taken away by ACL): lost once, with the reply. */
    @Test
    void aRenewalRefused_lostOnce_renewalRefusedNoperm() throws Exception {
        // A 600 ms lease, renewed every 200 ms.
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(600)).onLost((x, r) -> reasons.add(r)));
        try {
            server.cmd("ACL", "SETUSER", "default", "-lock.extend");
            assertTrue(TestServer.eventually(h::isLost, 3000), "lost");
            Thread.sleep(300); // a second report would come from a later renewal
            assertEquals(1, reasons.size(), "once: " + reasons);
            assertTrue(reasons.get(0).startsWith("renewal refused: NOPERM"), reasons.get(0));
            assertFalse(h.release(), "known lost");
        } finally {
            server.cmd("ACL", "SETUSER", "default", "+@all");
        }
    }

    /** The arguments of the last {@code command} in the server's SLOWLOG. */
    @SuppressWarnings("unchecked")
    List<Object> sent(String command) {
        for (Object entry : (List<Object>) server.cmd("SLOWLOG", "GET", "100")) {
            List<Object> args = (List<Object>) ((List<Object>) entry).get(3);
            if (String.valueOf(args.get(0)).equalsIgnoreCase(command)) {
                return args;
            }
        }
        return fail("no " + command + " in the SLOWLOG");
    }
}
