package io.redislock.spring;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.redislock.LockLostException;
import io.redislock.LockOptions;
import io.redislock.RedisLocks;
import io.redislock.TestServer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The LockRegistry contract on a real server: two registries stand for two processes, each on a
 * RedisLocks of its own over a RedisClient of its own.
 */
class ModuleLockRegistryTest {
    TestServer server;
    RedisClient otherClient;
    RedisLocks locks;
    RedisLocks otherLocks;
    ModuleLockRegistry registry;
    ModuleLockRegistry other;
    final List<String> lost = new CopyOnWriteArrayList<>();
    final ExecutorService threads = Executors.newCachedThreadPool();

    @BeforeEach
    void start() throws Exception {
        server = new TestServer();
        otherClient = RedisClient.create(RedisURI.create("127.0.0.1", server.port));
        locks = RedisLocks.create(server.client);
        otherLocks = RedisLocks.create(otherClient);
        LockOptions options = LockOptions.defaults().ttl(Duration.ofMillis(600)).onLost((hold, reason) -> lost.add(reason));
        registry = new ModuleLockRegistry(locks, "test:", options);
        other = new ModuleLockRegistry(otherLocks, "test:", options);
    }

    @AfterEach
    void stop() {
        threads.shutdownNow();
        locks.close();
        otherLocks.close();
        otherClient.shutdown(Duration.ZERO, Duration.ofSeconds(1));
        server.close();
    }

    @Test
    void obtainGivesTheSameLockForTheSameKey_onThePrefixedKey() throws Exception {
        ModuleLock lock = registry.obtain("a");
        assertSame(lock, registry.obtain("a"));
        assertSame(lock, threads.submit(() -> registry.obtain("a")).get(5, TimeUnit.SECONDS), "for every thread");
        assertNotSame(lock, registry.obtain("b"));
        assertEquals("test:a", lock.key());
        lock.lock();
        assertEquals(lock.redisLock().token(), server.cmd("LOCK.FENCE", "test:a"));
        assertTrue(lock.tryLock(), "reentrant by the owning thread");
        assertEquals(1L, server.info("test:a").get("permits"), "one server hold");
        lock.unlock();
        lock.unlock();
        assertNull(server.info("test:a"));
        assertThrows(IllegalArgumentException.class, () -> registry.obtain(42));
    }

    @Test
    void twoRegistriesExcludeEachOther() throws Exception {
        server.cmd("SET", "count", "0");
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger most = new AtomicInteger();
        List<Future<Integer>> workers = new ArrayList<>();
        for (ModuleLockRegistry r : List.of(registry, other, registry, other)) {
            workers.add(threads.submit(() -> {
                for (int i = 0; i < 15; i++) {
                    r.executeLocked("count", () -> {
                        most.accumulateAndGet(inside.incrementAndGet(), Math::max);
                        long n = Long.parseLong(String.valueOf(server.cmd("GET", "count")));
                        Thread.sleep(1);
                        server.cmd("SET", "count", String.valueOf(n + 1)); // lost if another ran between
                        inside.decrementAndGet();
                    });
                }
                return 15;
            }));
        }
        for (Future<Integer> w : workers) {
            w.get(60, TimeUnit.SECONDS);
        }
        assertEquals(1, most.get(), "never two holders at once");
        assertEquals("60", server.cmd("GET", "count"), "no update lost");
    }

    @Test
    void tryLockWithATimeoutWaitsInTheServersQueue() throws Exception {
        ModuleLock mine = registry.obtain("a");
        mine.lock();
        long before = server.calls("lock.acquire");
        Future<Boolean> got = threads.submit(() -> {
            ModuleLock theirs = other.obtain("a");
            boolean granted = theirs.tryLock(5, TimeUnit.SECONDS);
            theirs.unlock();
            return granted;
        });
        assertTrue(TestServer.eventually(() -> server.waiters("test:a") == 1, 3000), "queued on the server");
        Thread.sleep(200);
        mine.unlock();
        assertTrue(got.get(5, TimeUnit.SECONDS));
        assertEquals(1, server.calls("lock.acquire") - before, "one LOCK.ACQUIRE ... WAIT, no polling");

        mine.lock();
        long t0 = System.nanoTime();
        assertFalse(threads.submit(() -> other.obtain("a").tryLock(200, TimeUnit.MILLISECONDS)).get(5, TimeUnit.SECONDS));
        assertTrue(System.nanoTime() - t0 >= 190_000_000L, "waited its time");
        assertEquals(0, server.waiters("test:a"), "and left the queue");
        mine.unlock();
    }

    @Test
    void anotherThreadCannotUnlockOrRenew() throws Exception {
        ModuleLock lock = registry.obtain("a");
        lock.lock();
        assertTrue(threads.submit(() -> {
            assertThrows(IllegalMonitorStateException.class, lock::unlock);
            assertThrows(IllegalMonitorStateException.class, () -> registry.renewLock("a"));
            return !lock.tryLock();
        }).get(5, TimeUnit.SECONDS), "another thread of this process queues like any other owner");
        assertThrows(IllegalMonitorStateException.class, () -> registry.renewLock("never"));
        lock.unlock();
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
        assertThrows(UnsupportedOperationException.class, lock::newCondition);
    }

    @Test
    void aLostHoldIsReported_unlockAndExecuteLockedThrowLockLost() throws Exception {
        ModuleLock lock = registry.obtain("a");
        lock.lock();
        server.cmd("LOCK.FORCERELEASE", "test:a"); // the server ends the hold, as an expired lease would
        assertTrue(TestServer.eventually(() -> !lost.isEmpty(), 2000), "the watchdog saw it");
        assertThrows(LockLostException.class, lock::unlock);
        assertFalse(lock.redisLock().isHeldByCurrentThread());
        assertTrue(other.obtain("a").tryLock(), "free for the others");
        other.obtain("a").unlock();

        LockLostException e = assertThrows(LockLostException.class,
                () -> registry.executeLocked("b", () -> server.cmd("LOCK.FORCERELEASE", "test:b")));
        assertTrue(e.getMessage().contains("lost"), e.getMessage());
    }

    @Test
    void renewLockExtendsTheCurrentHold() throws Exception {
        ModuleLockRegistry fixed = new ModuleLockRegistry(locks, "fixed:", LockOptions.defaults().ttl(Duration.ofSeconds(30)).watchdog(false));
        ModuleLock lock = fixed.obtain("a");
        lock.lock();
        Thread.sleep(500);
        assertTrue((Long) server.info("fixed:a").get("ttl") <= 29_500);
        fixed.renewLock("a");
        assertTrue((Long) server.info("fixed:a").get("ttl") > 29_500, "by the hold's ttl, from now");
        fixed.renewLock("a", Duration.ofSeconds(90));
        assertTrue((Long) server.info("fixed:a").get("ttl") > 89_000);
        fixed.renewLock("a");
        assertTrue((Long) server.info("fixed:a").get("ttl") > 89_000, "the new ttl is the hold's now");
        server.cmd("LOCK.FORCERELEASE", "fixed:a");
        assertThrows(LockLostException.class, () -> fixed.renewLock("a"));
        assertThrows(LockLostException.class, lock::unlock);
    }

    @Test
    void expireUnusedOlderThanDropsOnlyLocksNoThreadHolds() throws Exception {
        ModuleLock held = registry.obtain("held");
        held.lock();
        ModuleLock idle = registry.obtain("idle");
        registry.expireUnusedOlderThan(60_000);
        assertSame(idle, registry.obtain("idle"), "too young");
        Thread.sleep(50);
        registry.expireUnusedOlderThan(20);
        assertNotSame(idle, registry.obtain("idle"));
        assertSame(held, registry.obtain("held"), "held: kept");
        held.unlock();
        registry.expireUnusedOlderThan(0);
        assertNotSame(held, registry.obtain("held"));
    }

    @Test
    void aPerCallTtlIsTheLeaseOfThatHold() throws Exception {
        ModuleLockRegistry fixed = new ModuleLockRegistry(locks, "fixed:", LockOptions.defaults().watchdog(false));
        ModuleLock lock = fixed.obtain("a");
        lock.lock(Duration.ofSeconds(5));
        long ttl = (Long) server.info("fixed:a").get("ttl");
        assertTrue(ttl > 4000 && ttl <= 5000, String.valueOf(ttl));
        lock.unlock();
        assertTrue(lock.tryLock(Duration.ofSeconds(1), Duration.ofMillis(300)));
        Thread.sleep(500);
        assertNull(server.info("fixed:a"), "a fixed lease of 300 ms ended");
        assertThrows(LockLostException.class, lock::unlock);
    }
}
