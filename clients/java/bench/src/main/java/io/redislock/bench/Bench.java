package io.redislock.bench;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.redislock.RedisLocks;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;
import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import org.redisson.config.SingleServerConfig;

/**
 * `make bench-java` (the last part of `make bench`): 32 threads of one JVM take one lock in turn,
 * hold it 1 ms (Thread.sleep) and unlock it, for BENCH_SECONDS (default 8) per contender after a
 * BENCH_WARMUP second (default 1, not counted), in one run on one server of its own with the
 * module:
 *
 * <pre>
 *   redis-lock-client   RedisLocks.lock(key): waits in the server's FIFO queue (LOCK.ACQUIRE WAIT)
 *   Redisson RLock      getLock(key): Lua over a hash (owner: count), waits on a pub/sub message or the TTL
 *   Redisson fair lock  getFairLock(key): Lua over a list and a sorted set of waiters
 * </pre>
 *
 * All three through java.util.concurrent.locks.Lock#tryLock(time left in the run): a wait still
 * going when the run ends counts with its length so far, so a starved thread shows in the p99.
 * Each keeps its default 30 s lease renewed by its watchdog (never needed with 1 ms holds);
 * Redisson is otherwise on its defaults too, printed with the results. Prints grants/s, Jain's
 * fairness index over the threads' grant counts (1 = all equal), the p50 and p99 of the time from
 * asking to holding, the overlaps (two holders at once: must be 0) and the ratios against each
 * Redisson lock. Exits 1 on an overlap, a take that failed or a run that does not end. Then the
 * lock sets' table ({@link MultiBench}) on the same server.
 */
public final class Bench {
    static final int THREADS = 32;
    static final long HOLD_MS = 1;
    static final double SECONDS = Double.parseDouble(Server.env("BENCH_SECONDS", "8"));
    static final double WARMUP = Double.parseDouble(Server.env("BENCH_WARMUP", "1"));
    /** A wait that ends ungranted with less than this left was cut by the run's end (ms rounding). */
    static final long SLACK_NANOS = TimeUnit.MILLISECONDS.toNanos(10);

    record Result(String name, long grants, double perSecond, double jain, double p50, double p99, long overlaps,
            long failed) {}

    private Bench() {}

    /** {@code THREADS} threads looping tryLock(time left) -> hold 1 ms -> unlock for {@code seconds}. */
    static Result run(String name, Lock lock, double seconds) throws InterruptedException {
        long[] counts = new long[THREADS];
        List<List<Long>> waits = new ArrayList<>();
        AtomicInteger inside = new AtomicInteger();
        AtomicLong overlaps = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicReference<Throwable> firstError = new AtomicReference<>();
        CountDownLatch go = new CountDownLatch(1);
        long length = (long) (seconds * 1e9);
        long[] end = new long[1];
        Thread[] threads = new Thread[THREADS];
        for (int t = 0; t < THREADS; t++) {
            int i = t;
            List<Long> mine = new ArrayList<>();
            waits.add(mine);
            threads[t] = new Thread(() -> {
                try {
                    go.await();
                    for (;;) {
                        long asked = System.nanoTime();
                        long left = end[0] - asked;
                        if (left <= 0) {
                            return;
                        }
                        boolean granted;
                        try {
                            granted = lock.tryLock(left, TimeUnit.NANOSECONDS);
                        } catch (RuntimeException e) {
                            failed.incrementAndGet();
                            firstError.compareAndSet(null, e);
                            Thread.sleep(10);
                            continue;
                        }
                        long now = System.nanoTime();
                        mine.add(now - asked);
                        if (!granted) {
                            if (end[0] - now > SLACK_NANOS) {
                                failed.incrementAndGet(); // gave up with the run still going
                            }
                            continue;
                        }
                        if (inside.incrementAndGet() > 1) {
                            overlaps.incrementAndGet();
                        }
                        Thread.sleep(HOLD_MS);
                        inside.decrementAndGet();
                        try {
                            lock.unlock();
                        } catch (RuntimeException e) {
                            failed.incrementAndGet();
                            firstError.compareAndSet(null, e);
                        }
                        counts[i]++;
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } catch (Throwable e) {
                    failed.incrementAndGet(); // this thread stops; the run goes on and fails
                    firstError.compareAndSet(null, e);
                }
            }, "bench-" + t);
            threads[t].setDaemon(true);
            threads[t].start();
        }
        long started = System.nanoTime();
        end[0] = started + length;
        go.countDown(); // publishes end[0] to the threads
        long joinBy = end[0] + TimeUnit.SECONDS.toNanos(15);
        for (Thread t : threads) {
            t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(joinBy - System.nanoTime())));
            if (t.isAlive()) {
                throw new IllegalStateException(name + ": a thread still runs 15 s after the end");
            }
        }
        double took = (System.nanoTime() - started) / 1e9;
        if (firstError.get() != null) {
            System.err.println(name + ": a take or release failed: " + firstError.get());
        }
        long grants = Arrays.stream(counts).sum();
        double squares = Arrays.stream(counts).mapToDouble(c -> (double) c * c).sum();
        double jain = squares > 0 ? (double) grants * grants / (THREADS * squares) : 0;
        long[] all = waits.stream().flatMap(List::stream).mapToLong(Long::longValue).sorted().toArray();
        return new Result(name, grants, grants / took, jain, quantile(all, 0.50), quantile(all, 0.99), overlaps.get(),
                failed.get());
    }

    /** The nearest-rank quantile of sorted nanoseconds, in ms. */
    static double quantile(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = Math.min(sorted.length - 1, (int) Math.ceil(q * sorted.length) - 1);
        return sorted[Math.max(i, 0)] / 1e6;
    }

    /** 8 as "8", 0.5 as "0.5". */
    static String seconds(double s) {
        return s == Math.rint(s) ? String.valueOf((long) s) : String.valueOf(s);
    }

    static Result measure(String name, Lock lock) throws InterruptedException {
        if (WARMUP > 0) {
            run(name, lock, WARMUP);
        }
        return run(name, lock, SECONDS);
    }

    public static void main(String[] args) {
        boolean ok;
        try {
            ok = bench();
        } catch (Throwable e) {
            e.printStackTrace();
            ok = false;
        }
        System.exit(ok ? 0 : 1); // Redisson's and Lettuce's threads never keep the JVM up
    }

    /** The whole run; whether it passed (no overlap, no failed take, grants for every lock). */
    static boolean bench() throws Exception {
        long began = System.nanoTime();
        Server server = new Server();
        Thread stop = new Thread(server::close, "bench-server-stop");
        Runtime.getRuntime().addShutdownHook(stop); // a Ctrl-C (or Maven's stop) still stops it
        boolean ok = false;
        RedisClient lettuce = null;
        RedissonClient redisson = null;
        try {
            lettuce = RedisClient.create(RedisURI.create("127.0.0.1", server.port));
            RedisLocks locks = RedisLocks.create(lettuce);
            Config config = new Config();
            SingleServerConfig single = config.useSingleServer().setAddress("redis://127.0.0.1:" + server.port);
            redisson = Redisson.create(config);

            List<Result> results = new ArrayList<>();
            results.add(measure("redis-lock-client (RedisLock, the server's queue)", locks.lock("bench:java:ours")));
            results.add(measure("Redisson RLock (getLock)", redisson.getLock("bench:java:rlock")));
            results.add(measure("Redisson fair lock (getFairLock)", redisson.getFairLock("bench:java:fair")));

            System.out.printf(Locale.ROOT, "%n%d threads on one lock, %d ms holds, %s s each after a %s s warm-up, %s%n",
                    THREADS, HOLD_MS, seconds(SECONDS), seconds(WARMUP), server.version());
            System.out.printf(Locale.ROOT, "Redisson %s defaults: lockWatchdogTimeout %d ms, fairLockWaitTimeout %d ms, "
                    + "%d connections (%d idle), %d subscription connections, %d Netty threads%n%n",
                    System.getProperty("redisson.version", "?"), config.getLockWatchdogTimeout(),
                    config.getFairLockWaitTimeout(),
                    single.getConnectionPoolSize(), single.getConnectionMinimumIdleSize(),
                    single.getSubscriptionConnectionPoolSize(), config.getNettyThreads());
            System.out.println("| lock | grants/s | Jain | wait p50 ms | wait p99 ms | overlaps | failed takes |");
            System.out.println("|---|---|---|---|---|---|---|");
            for (Result r : results) {
                System.out.printf(Locale.ROOT, "| %s | %.0f | %.4f | %.1f | %.1f | %d | %d |%n", r.name, r.perSecond,
                        r.jain, r.p50, r.p99, r.overlaps, r.failed);
            }
            System.out.println();
            Result mine = results.get(0);
            for (Result r : results.subList(1, results.size())) {
                System.out.printf(Locale.ROOT, "redis-lock-client vs %s: grants/s x%.2f, Jain %.4f vs %.4f, "
                        + "wait p99 %.1f ms vs %.1f ms (%.1f times shorter)%n", r.name, mine.perSecond / r.perSecond,
                        mine.jain, r.jain, mine.p99, r.p99, r.p99 / mine.p99);
            }
            System.out.printf(Locale.ROOT, "%ntook %.1f s%n", (System.nanoTime() - began) / 1e9);
            ok = results.stream().allMatch(r -> r.overlaps == 0 && r.failed == 0 && r.grants > 0);
            if (!ok) {
                System.err.println("FAILED: two holders at once, a failed take, or no grant at all");
            }
            // Lock sets (issue 36): the same server and clients, after the single lock's table.
            ok &= MultiBench.bench(locks, redisson, server.version());
            locks.close();
            System.out.printf(Locale.ROOT, "%nthe whole run took %.1f s%n", (System.nanoTime() - began) / 1e9);
        } finally {
            if (redisson != null) {
                redisson.shutdown(0, 2, TimeUnit.SECONDS);
            }
            if (lettuce != null) {
                lettuce.shutdown(Duration.ZERO, Duration.ofSeconds(2));
            }
            server.close();
        }
        return ok;
    }
}
