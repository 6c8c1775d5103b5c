package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Rule 23 (lock sets: LOCK.MACQUIRE, LOCK.MRELEASE) against a real server with the module. */
class LockSetsTest extends OnServer {
    static final List<String> KEYS = List.of("acct:1", "acct:2", "acct:3");
    RedisLocks other;

    @BeforeEach
    void startOther() {
        other = RedisLocks.create(server.client);
    }

    @AfterEach
    void stopOther() {
        other.close();
    }

    @Test
    void aSetIsTakenAndReleasedWholeWithATokenPerKey() throws Exception {
        long before = server.calls("lock.macquire");
        MultiHold set = locks.acquireAll(KEYS, Duration.ofSeconds(2));
        assertEquals(1, server.calls("lock.macquire") - before, "one LOCK.MACQUIRE for the whole set");
        assertEquals(KEYS, set.keys());
        assertEquals(3, set.tokens().size());
        for (int i = 0; i < KEYS.size(); i++) {
            String k = KEYS.get(i);
            assertEquals(set.tokens().get(i), set.token(k), "tokens in the order of the keys");
            assertEquals(set.token(k), server.cmd("LOCK.FENCE", k), "the server's fence is the member's token");
            assertEquals(set.owner(), server.info(k).get("owner"));
        }
        assertThrows(IllegalArgumentException.class, () -> set.token("other"));
        assertTrue(set.release());
        for (String k : KEYS) {
            assertNull(server.info(k), k + " released");
        }
        assertFalse(set.release(), "a second release: false");
        assertFalse(set.isLost());
    }

    @Test
    void tryOnceIsNullWhenOneKeyIsBusyAndTakesNothing() throws Exception {
        Hold busy = other.tryAcquire("acct:2");
        assertNotNull(busy);
        assertNull(locks.tryAcquireAll(KEYS), "not all free: none taken");
        assertNull(server.info("acct:1"));
        assertNull(server.info("acct:3"));
        assertEquals(0, server.waiters("acct:2"), "the try-once form does not queue");
        RedisMultiLock lock = locks.multiLock("acct:1", "acct:2", "acct:3");
        assertFalse(lock.tryLock());
        assertThrows(NotAcquiredException.class, () -> locks.acquireAll(KEYS, Duration.ofMillis(100)));
        assertNull(server.info("acct:1"), "a wait that ended took nothing");
        assertTrue(TestServer.eventually(() -> server.waiters("acct:2") == 0, 3000), "and left every queue");
        assertTrue(busy.release());
        assertTrue(lock.tryLock());
        assertNotNull(lock.hold().token("acct:2"));
        lock.unlock();
        assertNull(server.info("acct:2"));
    }

    @Test
    void twoSetsInOppositeOrdersAreBothGrantedInTurn() throws Exception {
        List<String> forward = List.of("a", "b", "c");
        List<String> backward = new ArrayList<>(forward);
        Collections.reverse(backward);
        Hold blocker = other.acquire("b", Duration.ZERO); // both sets queue behind it
        List<String> order = new CopyOnWriteArrayList<>();
        CompletableFuture<Void> one = CompletableFuture.runAsync(() -> holdBriefly(locks, forward, "forward", order));
        assertTrue(TestServer.eventually(() -> server.waiters("b") == 1, 3000));
        CompletableFuture<Void> two = CompletableFuture.runAsync(() -> holdBriefly(other, backward, "backward", order));
        assertTrue(TestServer.eventually(() -> server.waiters("b") == 2, 3000));
        assertTrue(blocker.release());
        CompletableFuture.allOf(one, two).get(10, TimeUnit.SECONDS); // no deadlock
        assertEquals(List.of("forward", "backward"), order, "granted in turn, in the queue's order");
    }

    private static void holdBriefly(RedisLocks on, List<String> keys, String name, List<String> order) {
        try (MultiHold h = on.acquireAll(keys, Duration.ofSeconds(8))) {
            order.add(h.isLost() ? "lost" : name);
            Thread.sleep(50);
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
    }

    @Test
    void theWatchdogKeepsASetPastSeveralTtls() throws Exception {
        MultiHold set = locks.acquireAll(KEYS, Duration.ZERO, LockOptions.defaults().ttl(Duration.ofMillis(300)));
        long renewals = server.calls("lock.extend");
        Thread.sleep(1200); // four leases
        assertFalse(set.isLost());
        assertTrue(server.calls("lock.extend") - renewals >= 3, "each member renewed");
        for (String k : KEYS) {
            assertEquals(set.token(k), server.cmd("LOCK.FENCE", k), k + " still held");
        }
        assertTrue(set.extend(Duration.ofSeconds(5)));
        assertTrue((Long) server.info("acct:3").get("ttl") > 3000, "extended to 5 s");
        assertTrue(set.release());
        assertNoRenewalAfterwards("acct:1");
    }

    @Test
    void aMemberLostLosesTheSetOnceNamingTheKeyAndReleasesTheOthers() throws Exception {
        List<String> reasons = new CopyOnWriteArrayList<>();
        List<String> optionReasons = new CopyOnWriteArrayList<>();
        MultiHold set = locks.acquireAll(KEYS, Duration.ZERO,
                LockOptions.defaults().ttl(Duration.ofMillis(600)).onLost((h, r) -> optionReasons.add(h.key() + "|" + r)));
        set.onLost((s, r) -> reasons.add(r));
        server.cmd("LOCK.FORCERELEASE", "acct:2");
        assertTrue(TestServer.eventually(() -> !reasons.isEmpty(), 3000), "lost at the next renewal");
        assertEquals(List.of("acct:2: " + Protocol.RAN_OUT), reasons);
        assertEquals(List.of("acct:2|acct:2: " + Protocol.RAN_OUT), optionReasons);
        assertTrue(TestServer.eventually(() -> server.info("acct:1") == null && server.info("acct:3") == null, 3000),
                "the members still held were released");
        Thread.sleep(700); // past a lease: nothing more reported
        assertEquals(1, reasons.size(), "reported once");
        assertEquals(1, optionReasons.size());
        assertTrue(set.isLost());
        long before = server.calls("lock.mrelease");
        assertFalse(set.release(), "release of a set known lost: false");
        assertEquals(before, server.calls("lock.mrelease"), "nothing sent");
        assertThrows(StaleTokenException.class, () -> set.guard("acct:1", "SET", "x", "1"));
        assertFalse(set.extend());
    }

    @Test
    void releaseIsTrueOnlyIfEveryMemberWasHeld() throws Exception {
        MultiHold set = locks.acquireAll(KEYS, Duration.ZERO, LockOptions.defaults().watchdog(false).ttl(Duration.ofSeconds(30)));
        server.cmd("LOCK.FORCERELEASE", "acct:3"); // the watchdog is off: the client does not know yet
        assertFalse(set.release(), "one of the three was gone");
        assertTrue(set.isLost());
        assertEquals(Protocol.GONE_WHEN_RELEASED, set.lostReason().orElseThrow());
        assertNull(server.info("acct:1"));
        assertNull(server.info("acct:2"));
        MultiHold again = locks.acquireAll(KEYS, Duration.ZERO);
        assertThrows(LockLostException.class, () -> {
            server.cmd("LOCK.FORCERELEASE", "acct:1");
            again.close();
        });
    }

    @Test
    void argumentErrorsBeforeAnythingIsSent() {
        long before = server.calls("lock.macquire");
        assertThrows(IllegalArgumentException.class, () -> locks.tryAcquireAll(List.of()));
        assertThrows(IllegalArgumentException.class, () -> locks.tryAcquireAll(List.of("a", "b", "a")));
        List<String> many = new ArrayList<>();
        for (int i = 0; i < 65; i++) {
            many.add("k" + i);
        }
        assertThrows(IllegalArgumentException.class, () -> locks.acquireAll(many, Duration.ofSeconds(1)));
        assertThrows(IllegalArgumentException.class, () -> locks.multiLock("a", "a"));
        assertThrows(IllegalArgumentException.class, () -> locks.tryAcquireAll(List.of("a"), LockOptions.defaults().permits(3, 1)));
        assertThrows(IllegalArgumentException.class, () -> LockOptions.defaults().ttl(Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> locks.acquireAll(List.of("a"), Duration.ofMillis(-1)));
        assertEquals(before, server.calls("lock.macquire"), "nothing sent");
        MultiHold sixtyFour = locks.tryAcquireAll(many.subList(0, 64));
        assertNotNull(sixtyFour, "64 keys are a set");
        assertTrue(sixtyFour.release());
    }

    @Test
    void aGuardedWriteNamesItsKeyAndSendsThatKeysToken() throws Exception {
        try (MultiHold set = locks.acquireAll(List.of("from", "to"), Duration.ZERO)) {
            assertEquals("OK", set.guard("from", "SET", "from:balance", "90"));
            assertEquals("OK", set.guard("to", "SET", "to:balance", "110"));
            assertEquals(set.token("to"), set.member("to").token());
            server.cmd("LOCK.FORCERELEASE", "to");
            Hold next = other.acquire("to", Duration.ZERO);
            assertThrows(StaleTokenException.class, () -> set.guard("to", "SET", "to:balance", "0"), "the newer holder's key");
            assertEquals("110", server.cmd("GET", "to:balance"));
            next.release();
            assertThrows(IllegalArgumentException.class, () -> set.guard("elsewhere", "SET", "x", "1"));
            assertThrows(LockLostException.class, set::close); // the set lost "to": leaving its scope says so
        } catch (LockLostException expected) {
            // try-with-resources closes once more: false, nothing thrown by that second close
        }
    }

    @Test
    void sharedSetsShareAndExcludeAWriter() throws Exception {
        MultiHold r1 = locks.tryAcquireAll(KEYS, LockOptions.defaults().shared());
        MultiHold r2 = other.tryAcquireAll(KEYS, LockOptions.defaults().shared());
        assertNotNull(r1);
        assertNotNull(r2);
        assertNull(other.tryAcquireAll(List.of("acct:2")), "a writer waits for the readers");
        assertTrue(r1.release());
        assertTrue(r2.release());
        assertNotNull(other.tryAcquireAll(List.of("acct:2")));
    }

    @Test
    void aMultiLockIsAReentrantLockOfTheWholeSet() throws Exception {
        RedisMultiLock a = locks.multiLock("x", "y");
        RedisMultiLock b = other.multiLock("y", "x");
        a.lock();
        a.lock();
        assertFalse(b.tryLock(50, TimeUnit.MILLISECONDS));
        a.unlock();
        assertNotNull(server.info("x"), "still held: one count left");
        CompletableFuture<Boolean> got = LocksTest.inThread(() -> {
            boolean ok = b.tryLock(5, TimeUnit.SECONDS);
            b.unlock();
            return ok;
        });
        assertTrue(TestServer.eventually(() -> server.waiters("x") == 1, 3000));
        a.unlock();
        assertTrue(got.get(5, TimeUnit.SECONDS));
        assertThrows(IllegalMonitorStateException.class, a::unlock);
    }
}
