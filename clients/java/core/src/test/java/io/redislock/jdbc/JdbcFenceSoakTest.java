package io.redislock.jdbc;

import static org.junit.jupiter.api.Assertions.*;

import io.redislock.jdbc.TestDatabase.Kind;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The inventory end to end, per database: three worker JVMs ({@link FenceSoakWorker}) sell a
 * stock of 100 through {@link JdbcFence}, with leases of 500 ms. Each pauses itself (SIGSTOP)
 * inside its transaction after the read of its 3rd sale, and the test SIGSTOPs workers at random
 * moments (up to 8); a worker stopped for two leases or more is resumed (SIGCONT). The stock adds
 * up: every worker exits successfully, sales + stock left = 100, and the sales the workers report
 * are the rows. How many holds went stale or changed hands is the scheduler's, never asserted.
 */
class JdbcFenceSoakTest extends WithRedis {
    static final int WORKERS = 3;
    static final long RESUME_AFTER_MS = 2 * FenceSoakWorker.LEASE_MS;
    static final long DEADLINE_MS = 60_000;
    /** Random stops per soak at most: each may hold the others up for two leases. */
    static final int RANDOM_STOPS = 8;

    @ParameterizedTest(name = "{0}")
    @EnumSource(Kind.class)
    void workerJvmsPausedPastTheirLease_theStockAddsUp(Kind kind) throws Exception {
        TestDatabase db = TestDatabase.of(kind);
        Shop shop = Shop.open(db, 100);
        String key = TestDatabase.unique("sku") + ":lock";
        String java = ProcessHandle.current().info().command().orElse("java");
        List<Process> workers = new ArrayList<>();
        List<String> lines = new CopyOnWriteArrayList<>();
        List<Thread> readers = new ArrayList<>();
        Path logs = Files.createTempDirectory("redislock-java-soak-");
        long start = System.nanoTime();
        try {
            for (int i = 0; i < WORKERS; i++) {
                Process p = new ProcessBuilder(java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp",
                        System.getProperty("java.class.path"), FenceSoakWorker.class.getName(),
                        String.valueOf(server.port), db.url, key, shop.stock, shop.sales, shop.fences, "3", "w" + i)
                        .redirectError(logs.resolve("w" + i + ".err").toFile()).start();
                workers.add(p);
                Thread r = new Thread(() -> {
                    try (BufferedReader in = new BufferedReader(new InputStreamReader(p.getInputStream()))) {
                        for (String l; (l = in.readLine()) != null;) {
                            lines.add(l);
                        }
                    } catch (IOException e) {
                        // ended
                    }
                });
                r.start();
                readers.add(r);
            }
            int stops = superviseUntilAllExit(workers, start);
            for (Thread r : readers) {
                r.join(5000);
            }
            long sold = lines.stream().filter("SOLD"::equals).count();
            System.err.printf("soak %s: %.1f s, %d random stops, %d self-pauses, %d stale, %d retried%n", kind,
                    (System.nanoTime() - start) / 1e9, stops, count(lines, "PAUSE"), count(lines, "STALE"),
                    count(lines, "RETRY"));
            for (int i = 0; i < WORKERS; i++) {
                int w = i;
                assertEquals(0, workers.get(i).exitValue(), () -> "worker w" + w + " failed:\n" + log(logs, w));
            }
            long rows = shop.sales(db);
            int left = shop.qty(db);
            assertTrue(left >= 0, "never oversold: " + left);
            assertEquals(100, rows + left, "sales + stock left = 100");
            assertEquals(rows, sold, "the sales the workers report are the rows");
            assertEquals(0, left, "the workers stopped on an empty stock");
            assertTrue(count(lines, "PAUSE") >= 1, "a worker paused inside its transaction (one of three sold 34 or more)");
        } finally {
            for (Process p : workers) {
                p.destroyForcibly(); // by its PID; a no-op for those that exited
            }
            for (int i = 0; i < WORKERS; i++) {
                Files.deleteIfExists(logs.resolve("w" + i + ".err"));
            }
            Files.deleteIfExists(logs);
        }
    }

    private static String log(Path logs, int worker) {
        try {
            return Files.readString(logs.resolve("w" + worker + ".err"));
        } catch (IOException e) {
            return e.toString();
        }
    }

    private static long count(List<String> lines, String prefix) {
        return lines.stream().filter(l -> l.startsWith(prefix)).count();
    }

    /**
     * Until every worker has exited: resumes those stopped for two leases or more, stops one at
     * random every 400-1000 ms (up to {@link #RANDOM_STOPS}); the random stops made. Fails at the deadline (the finally kills them).
     */
    private static int superviseUntilAllExit(List<Process> workers, long start) throws Exception {
        Map<Long, Long> stoppedSince = new HashMap<>();
        ThreadLocalRandom random = ThreadLocalRandom.current();
        long nextStop = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(random.nextLong(400, 1000));
        int stops = 0;
        while (workers.stream().anyMatch(Process::isAlive)) {
            long now = System.nanoTime();
            assertTrue(now - start < TimeUnit.MILLISECONDS.toNanos(DEADLINE_MS), "the soak ended within its deadline");
            List<Process> running = new ArrayList<>();
            for (Process p : workers) {
                char state = state(p.pid());
                if (state == 'T') {
                    long since = stoppedSince.computeIfAbsent(p.pid(), pid -> now);
                    if (now - since >= TimeUnit.MILLISECONDS.toNanos(RESUME_AFTER_MS)) {
                        signal("CONT", p.pid());
                        stoppedSince.remove(p.pid());
                    }
                } else {
                    stoppedSince.remove(p.pid());
                    if (state != 0 && p.isAlive()) {
                        running.add(p);
                    }
                }
            }
            if (now >= nextStop && !running.isEmpty() && stops < RANDOM_STOPS) {
                signal("STOP", running.get(random.nextInt(running.size())).pid());
                stops++;
                nextStop = now + TimeUnit.MILLISECONDS.toNanos(random.nextLong(400, 1000));
            }
            Thread.sleep(50);
        }
        return stops;
    }

    /** The process's state letter of /proc/PID/stat (T: stopped), 0 once it is gone. */
    private static char state(long pid) {
        try {
            String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            int close = stat.lastIndexOf(')');
            return stat.charAt(close + 2);
        } catch (IOException | StringIndexOutOfBoundsException e) {
            return 0;
        }
    }

    private static void signal(String signal, long pid) throws IOException, InterruptedException {
        new ProcessBuilder("kill", "-" + signal, String.valueOf(pid)).start().waitFor();
    }
}
