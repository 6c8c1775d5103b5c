package io.redislock.jdbc;

import static org.junit.jupiter.api.Assertions.*;

import io.redislock.Hold;
import io.redislock.LockOptions;
import io.redislock.RedisLocks;
import io.redislock.StaleTokenException;
import java.sql.Connection;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The two schedules of docs/fencing.md, run through a fenced-transaction helper ({@link Fenced}:
 * {@link JdbcFence} here, Spring's template in spring/) against a real database and real holds:
 * A's fixed lease of 300 ms ends and B, waiting in the lock's queue, gets a larger token; then
 * either A's late transaction meets B's fence, or B's meets A's still open one. Public, in the
 * core's test-jar.
 */
public final class FenceSchedules {
    /** The lease of A: fixed (no watchdog), short, so that B is granted when it ends. */
    static final LockOptions A_LEASE = LockOptions.defaults().ttl(Duration.ofMillis(300)).watchdog(false);
    /** B's lease outlasts the test: it is never the one that goes stale. */
    static final LockOptions B_LEASE = LockOptions.defaults().ttl(Duration.ofSeconds(30)).watchdog(false);
    /** How long a test waits to see a transaction wait for the fence row (it goes on either way). */
    static final long SEE_THE_WAIT_MS = 5000;

    private FenceSchedules() {}

    /** One fenced transaction of the helper under test: the body with its connection, what it returned. */
    @FunctionalInterface
    public interface Fenced {
        int run(Hold hold, SqlFunction<Connection, Integer> body) throws Exception;
    }

    /**
     * Item 1 of the tests: B (tB > tA) fences and reads 100; while B's transaction is open, A
     * enters with tA (its fence waits for B's row lock, or comes after B's commit: either way); B
     * writes 99 and commits. A gets the stale error and its body never runs; 99 left, one sale.
     */
    public static void aStaleHolderMeetsTheNewerFence(RedisLocks locks, TestDatabase db, Shop shop, Fenced fenced)
            throws Exception {
        String key = TestDatabase.unique("sku") + ":lock";
        Hold a = locks.acquire(key, Duration.ZERO, A_LEASE);
        Hold b = locks.acquire(key, Duration.ofSeconds(10), B_LEASE); // granted when A's lease ends
        assertTrue(b.token() > a.token(), "tB > tA");
        AtomicBoolean aBodyRan = new AtomicBoolean();
        CompletableFuture<Integer> aDone = new CompletableFuture<>();
        int bRead = fenced.run(b, c -> {
            int qty = shop.qty(c);
            CountDownLatch aEnters = new CountDownLatch(1);
            Thread aThread = new Thread(() -> { // A wakes up from its pause and enters the helper
                aEnters.countDown();
                try {
                    aDone.complete(fenced.run(a, c2 -> {
                        aBodyRan.set(true);
                        int read = shop.qty(c2);
                        shop.sell(c2, read, "A");
                        return read;
                    }));
                } catch (Throwable e) {
                    aDone.completeExceptionally(e);
                }
            }, "holder-A");
            aThread.start();
            try {
                assertTrue(aEnters.await(10, TimeUnit.SECONDS));
                boolean seen = db.awaitLockWaiter(shop.fences, SEE_THE_WAIT_MS);
                System.err.println(db + ": A's fence seen waiting for B's row lock: " + seen);
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
            shop.sell(c, qty, "B");
            return qty;
        });
        assertEquals(100, bRead, "B read the stock");
        ExecutionException failed = assertThrows(ExecutionException.class, () -> aDone.get(60, TimeUnit.SECONDS),
                "A's transaction must fail");
        assertInstanceOf(StaleTokenException.class, failed.getCause(), "A got the stale error");
        String message = failed.getCause().getMessage();
        assertTrue(message.contains(key) && message.contains(String.valueOf(a.token())),
                "the message names the fence and the token: " + message);
        assertFalse(aBodyRan.get(), "A's body never ran");
        assertEquals(99, shop.qty(db), "99 left");
        assertEquals(1, shop.sales(db), "exactly one sale");
        b.release();
    }

    /**
     * Item 3 of the tests: A fences and reads 100, then stays in its body past its lease; B is
     * granted, enters the helper and waits for the fence row; A writes 99 and commits; B then reads
     * 99 and writes 98. No stale error: 98 left, two sales.
     */
    public static void aHolderPausedInsideItsTransaction(RedisLocks locks, TestDatabase db, Shop shop, Fenced fenced)
            throws Exception {
        String key = TestDatabase.unique("sku") + ":lock";
        Hold a = locks.acquire(key, Duration.ZERO, A_LEASE);
        CompletableFuture<Integer> bDone = new CompletableFuture<>();
        CompletableFuture<Hold> bGranted = new CompletableFuture<>();
        int aRead = fenced.run(a, c -> {
            int qty = shop.qty(c);
            // A pauses here, inside its transaction, past its lease: B is granted and enters.
            Thread bThread = new Thread(() -> {
                try {
                    Hold b = locks.acquire(key, Duration.ofSeconds(10), B_LEASE);
                    bGranted.complete(b);
                    bDone.complete(fenced.run(b, c2 -> {
                        int read = shop.qty(c2);
                        shop.sell(c2, read, "B");
                        return read;
                    }));
                    b.release();
                } catch (Throwable e) {
                    bGranted.completeExceptionally(e);
                    bDone.completeExceptionally(e);
                }
            }, "holder-B");
            bThread.start();
            try {
                Hold b = bGranted.get(10, TimeUnit.SECONDS);
                assertTrue(b.token() > a.token(), "tB > tA");
                boolean seen = db.awaitLockWaiter(shop.fences, SEE_THE_WAIT_MS);
                System.err.println(db + ": B's fence seen waiting for A's row lock: " + seen);
            } catch (InterruptedException | ExecutionException | java.util.concurrent.TimeoutException e) {
                throw new AssertionError(e);
            }
            assertFalse(bDone.isDone(), "B cannot finish while A's transaction holds the fence row");
            shop.sell(c, qty, "A");
            return qty;
        });
        assertEquals(100, aRead, "A read 100");
        assertEquals(99, bDone.get(60, TimeUnit.SECONDS), "B read what A committed");
        assertEquals(98, shop.qty(db), "98 left");
        assertEquals(2, shop.sales(db), "two sales");
    }
}
