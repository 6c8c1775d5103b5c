package io.redislock.bench;

import io.redislock.Hold;
import io.redislock.MultiHold;
import io.redislock.NotAcquiredException;
import io.redislock.RedisLocks;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.redisson.RedissonMultiLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * The lock-set part of `make bench-java` (issue 36): WORKERS threads of one JVM each loop: draw a
 * random set of 2-4 of KEYS keys (a seeded Random per worker: the same sets in the same order for
 * every contender), take the whole set with a wait bounded at 10 s, hold it 1 ms (Thread.sleep),
 * release it; BENCH_SET_SECONDS (default 6) per contender after a BENCH_WARMUP second, on the
 * server and clients of {@link Bench}'s run:
 *
 * <pre>
 *   redis-lock-client acquireAll   one LOCK.MACQUIRE ... WAIT of the set, keys in the order drawn; one LOCK.MRELEASE
 *   redis-lock-client sorted       the keys sorted, LOCK.ACQUIRE ... WAIT (time left) one by one; LOCK.RELEASE of each
 *   Redisson MultiLock, sorted     new RedissonMultiLock(RLock...) of the keys sorted, tryLock(10 s, -1)
 *   Redisson MultiLock, as drawn   the same with the keys in the order drawn (no warm-up: Redisson is warm)
 * </pre>
 *
 * Redisson's {@code tryLock(waitTime, leaseTime = -1, unit)}: each RLock's lease is its watchdog's
 * (30 s, renewed), as ours; it takes the locks one by one in the list's order, waiting for each up
 * to the time left, and when one is not granted in that time it unlocks the ones it took and
 * starts again until the wait ends. A wait that ends ungranted is a timeout (with keys in the
 * order drawn, two sets that each hold a key the other waits for are a deadlock that only the
 * bound ends). Prints sets/s (sets taken over the whole time, the waits past the run's end
 * included), Jain's index over the workers' completed sets, the p50 and p99 of the wait (asking to
 * holding the whole set; a timeout counts 10 s), timeouts, overlaps (two holders of one key at
 * once: must be 0) and the ratios ours / each peer. Fails the run on an overlap, on a timeout or
 * an error of ours, or when a contender takes no set.
 */
final class MultiBench {
    static final int WORKERS = Integer.parseInt(Server.env("BENCH_SET_WORKERS", "16"));
    static final int KEYS = Integer.parseInt(Server.env("BENCH_SET_KEYS", "8"));
    static final double SECONDS = Double.parseDouble(Server.env("BENCH_SET_SECONDS", "6"));
    static final long SEED = Long.parseLong(Server.env("BENCH_SET_SEED", "36"));
    static final long HOLD_MS = 1;
    static final Duration WAIT = Duration.ofSeconds(10);

    /** One contender: takes a set within the wait (true), or times out (false); releases it. */
    interface Contender {
        Object take(List<String> keys, Duration wait) throws Exception;

        void release(Object held) throws Exception;
    }

    record Result(String name, long sets, double perSecond, double jain, double p50, double p99, long timeouts,
            long overlaps, long errors, double took) {}

    private MultiBench() {}

    /** The keys of set draws: {@code prefix} + k0..k(KEYS-1). */
    static List<List<Integer>> draws(Random r, int n) {
        List<List<Integer>> sets = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            int size = 2 + r.nextInt(3);
            List<Integer> all = new ArrayList<>();
            for (int k = 0; k < KEYS; k++) {
                all.add(k);
            }
            java.util.Collections.shuffle(all, r);
            sets.add(all.subList(0, size));
        }
        return sets;
    }

    static Result run(String name, String prefix, Contender c, double seconds) throws InterruptedException {
        long[] counts = new long[WORKERS];
        List<List<Long>> waits = new ArrayList<>();
        AtomicInteger[] inside = new AtomicInteger[KEYS];
        for (int k = 0; k < KEYS; k++) {
            inside[k] = new AtomicInteger();
        }
        AtomicLong overlaps = new AtomicLong();
        AtomicLong timeouts = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        AtomicReference<Throwable> firstError = new AtomicReference<>();
        CountDownLatch go = new CountDownLatch(1);
        long[] end = new long[1];
        Thread[] threads = new Thread[WORKERS];
        for (int t = 0; t < WORKERS; t++) {
            int w = t;
            List<Long> mine = new ArrayList<>();
            waits.add(mine);
            threads[t] = new Thread(() -> {
                Random r = new Random(SEED * 1_000 + w); // the same sets for every contender
                try {
                    go.await();
                    while (System.nanoTime() < end[0]) {
                        List<Integer> set = draws(r, 1).get(0);
                        List<String> keys = set.stream().map(k -> prefix + "k" + k).toList();
                        long asked = System.nanoTime();
                        Object held;
                        try {
                            held = c.take(keys, WAIT);
                        } catch (Exception e) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, e);
                            Thread.sleep(10);
                            continue;
                        }
                        mine.add(System.nanoTime() - asked);
                        if (held == null) {
                            timeouts.incrementAndGet();
                            continue;
                        }
                        for (int k : set) {
                            if (inside[k].incrementAndGet() > 1) {
                                overlaps.incrementAndGet();
                            }
                        }
                        Thread.sleep(HOLD_MS);
                        for (int k : set) {
                            inside[k].decrementAndGet();
                        }
                        try {
                            c.release(held);
                        } catch (Exception e) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, e);
                        }
                        counts[w]++;
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } catch (Throwable e) {
                    errors.incrementAndGet();
                    firstError.compareAndSet(null, e);
                }
            }, "bench-set-" + t);
            threads[t].setDaemon(true);
            threads[t].start();
        }
        long started = System.nanoTime();
        end[0] = started + (long) (seconds * 1e9);
        go.countDown();
        long joinBy = end[0] + WAIT.toNanos() + TimeUnit.SECONDS.toNanos(15);
        for (Thread t : threads) {
            t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(joinBy - System.nanoTime())));
            if (t.isAlive()) {
                throw new IllegalStateException(name + ": a worker still runs 25 s after the end");
            }
        }
        double took = (System.nanoTime() - started) / 1e9;
        if (firstError.get() != null) {
            System.err.println(name + ": a take or release failed: " + firstError.get());
        }
        long sets = Arrays.stream(counts).sum();
        double squares = Arrays.stream(counts).mapToDouble(x -> (double) x * x).sum();
        double jain = squares > 0 ? (double) sets * sets / (WORKERS * squares) : 0;
        long[] all = waits.stream().flatMap(List::stream).mapToLong(Long::longValue).sorted().toArray();
        return new Result(name, sets, sets / took, jain, Bench.quantile(all, 0.50), Bench.quantile(all, 0.99), timeouts.get(),
                overlaps.get(), errors.get(), took);
    }

    static Result measure(String name, String prefix, Contender c) throws InterruptedException {
        return measure(name, prefix, c, true);
    }

    static Result measure(String name, String prefix, Contender c, boolean warm) throws InterruptedException {
        if (warm && Bench.WARMUP > 0) {
            run(name, prefix + "warm:", c, Bench.WARMUP);
        }
        return run(name, prefix, c, SECONDS);
    }

    static List<String> sorted(List<String> keys) {
        return keys.stream().sorted().toList();
    }

    /** Ours: one LOCK.MACQUIRE ... WAIT of the set in the order drawn, one LOCK.MRELEASE. */
    static Contender acquireAll(RedisLocks locks) {
        return new Contender() {
            @Override
            public Object take(List<String> keys, Duration wait) throws InterruptedException {
                try {
                    return locks.acquireAll(keys, wait);
                } catch (NotAcquiredException e) {
                    return null;
                }
            }

            @Override
            public void release(Object held) {
                if (!((MultiHold) held).release()) {
                    throw new IllegalStateException("a set was lost: " + held);
                }
            }
        };
    }

    /** Ours, key by key: sorted, LOCK.ACQUIRE ... WAIT (time left) each; the releases sent together. */
    static Contender sortedSingles(RedisLocks locks) {
        return new Contender() {
            @Override
            public Object take(List<String> keys, Duration wait) throws InterruptedException {
                long end = System.nanoTime() + wait.toNanos();
                List<Hold> holds = new ArrayList<>();
                for (String k : sorted(keys)) {
                    try {
                        holds.add(locks.acquire(k, Duration.ofNanos(Math.max(1, end - System.nanoTime()))));
                    } catch (NotAcquiredException e) {
                        release(holds);
                        return null;
                    }
                }
                return holds;
            }

            @Override
            public void release(Object held) {
                @SuppressWarnings("unchecked")
                List<Hold> holds = (List<Hold>) held;
                CompletableFuture<?>[] all = holds.stream().map(Hold::releaseAsync).toArray(CompletableFuture[]::new);
                CompletableFuture.allOf(all).join();
            }
        };
    }

    /** Redisson's RedissonMultiLock of one RLock per key, in the order given (sorted or not). */
    static Contender redisson(RedissonClient redisson, boolean sort) {
        return new Contender() {
            @Override
            public Object take(List<String> keys, Duration wait) throws InterruptedException {
                RLock[] locks = (sort ? sorted(keys) : keys).stream().map(redisson::getLock).toArray(RLock[]::new);
                RedissonMultiLock multi = new RedissonMultiLock(locks);
                return multi.tryLock(wait.toMillis(), -1, TimeUnit.MILLISECONDS) ? multi : null;
            }

            @Override
            public void release(Object held) {
                ((RedissonMultiLock) held).unlock();
            }
        };
    }

    /** The lock-set table, on Bench's server and clients; whether it passed. */
    static boolean bench(RedisLocks locks, RedissonClient redisson, String serverVersion) throws InterruptedException {
        long began = System.nanoTime();
        List<Result> results = new ArrayList<>();
        results.add(measure("redis-lock-client acquireAll (LOCK.MACQUIRE WAIT)", "bench:set:ours:", acquireAll(locks)));
        results.add(measure("redis-lock-client, sorted one by one (LOCK.ACQUIRE WAIT)", "bench:set:sorted:", sortedSingles(locks)));
        results.add(measure("Redisson MultiLock, keys sorted", "bench:set:redisson-sorted:", redisson(redisson, true)));
        // Redisson warm from the row above: a warm-up of keys as drawn would only deadlock for 10 s.
        results.add(measure("Redisson MultiLock, keys as drawn", "bench:set:redisson:", redisson(redisson, false), false));

        System.out.printf(Locale.ROOT, "%nLock sets: %d workers, sets of 2-4 of %d keys (seed %d, the same sets for each), "
                + "%d ms holds, waits bounded at %d s, %s s each after a %s s warm-up, %s%n%n", WORKERS, KEYS, SEED, HOLD_MS,
                WAIT.toSeconds(), Bench.seconds(SECONDS), Bench.seconds(Bench.WARMUP), serverVersion);
        System.out.println("| contender | sets | sets/s | Jain | wait p50 ms | wait p99 ms | timeouts (10 s) | overlaps | errors "
                + "| took s |");
        System.out.println("|---|---|---|---|---|---|---|---|---|---|");
        for (Result r : results) {
            System.out.printf(Locale.ROOT, "| %s | %d | %.0f | %.4f | %.1f | %.1f | %d | %d | %d | %.1f |%n", r.name, r.sets, r.perSecond,
                    r.jain, r.p50, r.p99, r.timeouts, r.overlaps, r.errors, r.took);
        }
        System.out.println();
        Result mine = results.get(0);
        for (Result r : results.subList(1, results.size())) {
            System.out.printf(Locale.ROOT, "acquireAll / %s: sets/s %s, wait p99 %.1f ms / %.1f ms = %.2f, "
                    + "Jain %.4f / %.4f = %s, timeouts %d vs %d%n", r.name,
                    r.sets == 0 ? "(none taken by the peer)" : String.format(Locale.ROOT, "x%.2f", mine.perSecond / r.perSecond),
                    mine.p99, r.p99, mine.p99 / r.p99, mine.jain, r.jain,
                    r.jain == 0 ? "-" : String.format(Locale.ROOT, "%.2f", mine.jain / r.jain), mine.timeouts, r.timeouts);
        }
        System.out.printf(Locale.ROOT, "%nlock sets took %.1f s%n", (System.nanoTime() - began) / 1e9);
        boolean ok = results.stream().allMatch(r -> r.overlaps == 0)
                && results.subList(0, 2).stream().allMatch(r -> r.sets > 0 && r.timeouts == 0 && r.errors == 0);
        if (!ok) {
            System.err.println("FAILED (lock sets): two holders of a key at once, or a timeout, an error or no set of ours");
        }
        return ok;
    }
}
