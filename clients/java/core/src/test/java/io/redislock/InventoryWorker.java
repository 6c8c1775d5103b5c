package io.redislock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** One JVM of the 4-JVM inventory test: 4 threads sell through guard/DECRBY; prints SOLD per sale. */
public final class InventoryWorker {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        RedisClient client = RedisClient.create(RedisURI.create("127.0.0.1", port));
        RedisLocks locks = RedisLocks.create(client);
        // A 60 s unavailability bound: a cold JVM's first connect loads Netty and Lettuce, which
        // took over the default 10 s on a loaded 2-core machine (load 27): every thread then ended
        // unavailable and nothing was sold. Rule 14 is UnavailableTest's; this test is the fence's.
        LockOptions options = LockOptions.defaults().ttl(Duration.ofMillis(500)).unavailableAfter(Duration.ofSeconds(60));
        RedisLock lock = locks.lock("{sku:9}:lock", options);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            // 2 ms of work between the read and the write, where a pause hurts.
            Thread t = new Thread(() -> sellUntilGone(lock, 2, () -> say("SOLD"), () -> say("STALE")));
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        locks.close();
        client.shutdown();
    }

    private static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    /**
     * One seller: under {@code lock}, reads the stock and takes one item through guarded writes
     * until none is left, {@code workMs} between the read and the write; each sale and each write
     * refused as stale reported. A hold lost to a pause is the guard's to refuse.
     */
    static void sellUntilGone(RedisLock lock, long workMs, Runnable sold, Runnable stale) {
        for (;;) {
            lock.lock();
            try {
                long left = (Long) lock.guard("DECRBY", "{sku:9}:stock", "0");
                if (left <= 0) {
                    return;
                }
                if (workMs > 0) {
                    Thread.sleep(workMs);
                }
                lock.guard("DECRBY", "{sku:9}:stock", "1");
                sold.run();
            } catch (StaleTokenException e) {
                stale.run();
            } catch (InterruptedException e) {
                return;
            } finally {
                try {
                    lock.unlock();
                } catch (LockLostException e) {
                    // paused past the lease: the guard already refused the write
                }
            }
        }
    }
}
