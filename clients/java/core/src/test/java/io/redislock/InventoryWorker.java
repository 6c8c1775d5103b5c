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
        RedisLock lock = locks.lock("{sku:9}:lock", LockOptions.defaults().ttl(Duration.ofMillis(500)));
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            Thread t = new Thread(() -> {
                for (;;) {
                    lock.lock();
                    try {
                        long left = (Long) lock.guard("DECRBY", "{sku:9}:stock", "0");
                        if (left <= 0) {
                            return;
                        }
                        Thread.sleep(2); // the work between the read and the write, where a pause hurts
                        lock.guard("DECRBY", "{sku:9}:stock", "1");
                        synchronized (System.out) {
                            System.out.println("SOLD");
                            System.out.flush();
                        }
                    } catch (StaleTokenException e) {
                        synchronized (System.out) {
                            System.out.println("STALE");
                            System.out.flush();
                        }
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
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        locks.close();
        client.shutdown();
    }
}
