package io.redislock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.StringCodec;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code clients/java/bench/renewals --port P --holds N --ttl-ms T --seconds S} (run by
 * scripts/bench_renewals.py): N watchdog holds ({@code renew:<i>}) on one {@link RedisLocks},
 * kept S seconds; prints one JSON line last: the connections before and the most seen with the
 * holds, the holds lost, each renewal's lag (its reply's arrival minus when it fell due, the last
 * success's send time + ttl/3, told by the loop's package-private hook {@link
 * Renewals#lagObserver}: hence this package), and whether every other hold stayed live after hold
 * 0 was released.
 */
public final class RenewalsBench {
    private RenewalsBench() {}

    /** The lags seen, in ns. */
    private static final class Lags {
        private long[] values = new long[1 << 16];
        private int size;

        synchronized void add(long ns) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = ns;
        }

        synchronized long[] sorted() {
            long[] s = Arrays.copyOf(values, size);
            Arrays.sort(s);
            return s;
        }
    }

    public static void main(String[] argv) throws Exception {
        int port = (int) arg(argv, "--port", -1);
        int holds = (int) arg(argv, "--holds", 1000);
        long ttlMs = arg(argv, "--ttl-ms", 3000);
        long seconds = arg(argv, "--seconds", 30);
        RedisClient client = RedisClient.create(RedisURI.create("127.0.0.1", port));
        RedisClient adminClient = RedisClient.create(RedisURI.create("127.0.0.1", port));
        try (StatefulRedisConnection<String, String> admin = adminClient.connect(StringCodec.UTF8)) {
            long t0 = System.nanoTime();
            RedisLocks locks = RedisLocks.create(client);
            LockOptions o = LockOptions.defaults().ttl(Duration.ofMillis(ttlMs));
            locks.tryAcquire("renew:warm", o.watchdog(false)).release(); // one command: the command link
            System.err.printf("first command of a cold client object: %d ms%n", (System.nanoTime() - t0) / 1_000_000);
            long before = connectedClients(admin);
            Lags lags = new Lags();
            Renewals.lagObserver = lags::add;
            AtomicInteger lost = new AtomicInteger();
            Map<String, Integer> reasons = new ConcurrentHashMap<>();
            long asked = System.nanoTime();
            List<Hold> held = acquire(locks, holds, o.onLost((h, r) -> {
                lost.incrementAndGet();
                reasons.merge(r, 1, Integer::sum);
            }));
            System.err.printf("%d holds acquired in %d ms, %d lost meanwhile%n", holds, (System.nanoTime() - asked) / 1_000_000, lost.get());
            long most = before;
            for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds); System.nanoTime() < end;) {
                Thread.sleep(1000);
                most = Math.max(most, connectedClients(admin));
            }
            held.get(0).release();
            Thread.sleep(2 * ttlMs / 3); // two renewal intervals
            boolean othersLive = lost.get() == 0 && allHeld(admin, held.subList(1, holds));
            int lostBeforeRelease = lost.get();
            CompletableFuture.allOf(held.subList(1, holds).stream().map(Hold::releaseAsync).toArray(CompletableFuture[]::new))
                    .get(60, TimeUnit.SECONDS);
            Renewals.lagObserver = null;
            locks.close();
            reasons.forEach((r, n) -> System.err.printf("lost %d: %s%n", n, r));
            System.out.println(json(holds, before, most, lostBeforeRelease, lags.sorted(), othersLive));
        } finally {
            client.shutdown(Duration.ZERO, Duration.ofSeconds(1));
            adminClient.shutdown(Duration.ZERO, Duration.ofSeconds(1));
        }
    }

    /** How many acquires are in flight at once: a reply that waits behind thousands would start its lease late. */
    private static final int WINDOW = 64;

    /** N holds, asked for WINDOW at a time (the try-once form), each waited for. */
    private static List<Hold> acquire(RedisLocks locks, int holds, LockOptions o) throws Exception {
        Semaphore window = new Semaphore(WINDOW);
        List<CompletableFuture<Hold>> asked = new ArrayList<>();
        for (int i = 0; i < holds; i++) {
            window.acquire();
            CompletableFuture<Hold> f = locks.acquireAsync("renew:" + i, Duration.ZERO, o);
            f.whenComplete((h, e) -> window.release());
            asked.add(f);
        }
        List<Hold> held = new ArrayList<>();
        for (CompletableFuture<Hold> f : asked) {
            held.add(f.get(60, TimeUnit.SECONDS));
        }
        return held;
    }

    /** Every hold's lock is on the server with its token (LOCK.INFO, pipelined). */
    private static boolean allHeld(StatefulRedisConnection<String, String> admin, List<Hold> holds) throws Exception {
        List<CompletableFuture<Boolean>> checks = new ArrayList<>();
        for (Hold h : holds) {
            checks.add(admin.async().dispatch(new Link.Name("LOCK.INFO"), new AnyOutput(),
                    new io.lettuce.core.protocol.CommandArgs<>(StringCodec.UTF8).addKey(h.key()))
                    .thenApply(info -> info instanceof List<?> l && l.contains(h.token())).toCompletableFuture());
        }
        boolean all = true;
        for (CompletableFuture<Boolean> c : checks) {
            all &= c.get(60, TimeUnit.SECONDS);
        }
        return all;
    }

    private static long connectedClients(StatefulRedisConnection<String, String> admin) {
        Matcher m = Pattern.compile("connected_clients:(\\d+)").matcher(admin.sync().info("clients"));
        return m.find() ? Long.parseLong(m.group(1)) : -1;
    }

    private static String json(int holds, long before, long after, int lost, long[] lags, boolean othersLive) {
        return String.format(Locale.ROOT,
                "{\"client\": \"java\", \"holds\": %d, \"connections_before\": %d, \"connections_after\": %d, \"lost\": %d, "
                        + "\"lag_ms\": {\"p50\": %.3f, \"p99\": %.3f, \"max\": %.3f}, \"renewals\": %d, "
                        + "\"others_live_after_release\": %b}",
                holds, before, after, lost, ms(lags, 0.50), ms(lags, 0.99), ms(lags, 1.0), lags.length, othersLive);
    }

    /** The q-quantile of the sorted lags, in ms (0 when none). */
    private static double ms(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1);
        return sorted[Math.max(0, i)] / 1e6;
    }

    private static long arg(String[] argv, String name, long otherwise) {
        for (int i = 0; i + 1 < argv.length; i++) {
            if (argv[i].equals(name)) {
                return Long.parseLong(argv[i + 1]);
            }
        }
        if (otherwise < 0) {
            throw new IllegalArgumentException(name + " is required");
        }
        return otherwise;
    }
}
