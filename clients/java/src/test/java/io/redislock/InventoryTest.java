package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** The inventory scenario of the field reports: 16 threads sell from a stock of 100, exactly 100 sold. */
class InventoryTest {
    @Test
    void sixteenThreadsSellExactlyTheStock() throws Exception {
        try (TestServer server = new TestServer(); RedisLocks locks = RedisLocks.create(server.client)) {
            server.cmd("SET", "{sku:9}:stock", "100");
            RedisLock lock = locks.lock("{sku:9}:lock", LockOptions.defaults().ttl(Duration.ofSeconds(5)));
            AtomicInteger sold = new AtomicInteger();
            AtomicInteger stale = new AtomicInteger();
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                Thread t = new Thread(() -> {
                    for (;;) {
                        lock.lock();
                        try {
                            long left = (Long) lock.guard("DECRBY", "{sku:9}:stock", "0");
                            if (left <= 0) {
                                return;
                            }
                            lock.guard("DECRBY", "{sku:9}:stock", "1");
                            sold.incrementAndGet();
                        } catch (StaleTokenException e) {
                            stale.incrementAndGet();
                        } finally {
                            lock.unlock();
                        }
                    }
                });
                threads.add(t);
                t.start();
            }
            for (Thread t : threads) {
                t.join(60_000);
            }
            assertEquals(100, sold.get());
            assertEquals(0, stale.get());
            assertEquals("0", server.cmd("GET", "{sku:9}:stock"));
            assertNull(server.info("{sku:9}:lock"));
        }
    }
}
