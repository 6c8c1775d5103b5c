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
    void fourJvmsOfFourThreads_holdersPausedPastTheirLease_exactly100Sold() throws Exception {
        try (TestServer server = new TestServer()) {
            server.cmd("SET", "{sku:9}:stock", "100");
            String javaBin = ProcessHandle.current().info().command().orElse("java");
            String cp = System.getProperty("java.class.path");
            List<Process> jvms = new ArrayList<>();
            // The workers' stderr (Lettuce's logging, an exception that ended a seller) goes to a
            // file, shown when the count is wrong.
            java.nio.file.Path errors = java.nio.file.Files.createTempFile("inventory-workers", ".err");
            for (int i = 0; i < 4; i++) {
                jvms.add(new ProcessBuilder(javaBin, "-cp", cp, "io.redislock.InventoryWorker", String.valueOf(server.port))
                        .redirectError(ProcessBuilder.Redirect.appendTo(errors.toFile())).start());
            }
            List<String> lines = new java.util.concurrent.CopyOnWriteArrayList<>();
            List<Thread> readers = new ArrayList<>();
            for (Process p : jvms) {
                Thread r = new Thread(() -> {
                    try (var in = new java.io.BufferedReader(new java.io.InputStreamReader(p.getInputStream()))) {
                        for (String l; (l = in.readLine()) != null;) {
                            lines.add(l);
                        }
                    } catch (java.io.IOException e) {
                        // ended
                    }
                });
                r.start();
                readers.add(r);
            }
            // Pause each JVM in turn past the 500 ms lease (SIGSTOP: GC, swap), while it may hold.
            int paused = 0;
            for (Process p : jvms) {
                if (lines.stream().filter("SOLD"::equals).count() >= 90) {
                    break;
                }
                Thread.sleep(150);
                new ProcessBuilder("kill", "-STOP", String.valueOf(p.pid())).start().waitFor();
                Thread.sleep(800);
                new ProcessBuilder("kill", "-CONT", String.valueOf(p.pid())).start().waitFor();
                paused++;
            }
            for (Process p : jvms) {
                assertTrue(p.waitFor(60, java.util.concurrent.TimeUnit.SECONDS), "a worker ended");
            }
            for (Thread r : readers) {
                r.join(5000);
            }
            System.err.println("inventory: paused " + paused + " JVMs, " + lines.stream().filter("STALE"::equals).count()
                    + " writes refused as STALE");
            assertTrue(paused >= 1, "at least one JVM was paused");
            String stderr = java.nio.file.Files.readString(errors);
            java.nio.file.Files.delete(errors);
            assertEquals(100, lines.stream().filter("SOLD"::equals).count(),
                    () -> "exactly the stock was sold; the workers' stderr:\n" + stderr.lines()
                            .filter(l -> !l.startsWith("SLF4J")).limit(60).collect(java.util.stream.Collectors.joining("\n")));
            assertEquals("0", server.cmd("GET", "{sku:9}:stock"), "never below zero");
        }
    }

    @Test
    void sixteenThreadsSellExactlyTheStock() throws Exception {
        try (TestServer server = new TestServer(); RedisLocks locks = RedisLocks.create(server.client)) {
            server.cmd("SET", "{sku:9}:stock", "100");
            RedisLock lock = locks.lock("{sku:9}:lock", LockOptions.defaults().ttl(Duration.ofSeconds(5)));
            AtomicInteger sold = new AtomicInteger();
            AtomicInteger stale = new AtomicInteger();
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                Thread t = new Thread(() -> InventoryWorker.sellUntilGone(lock, 0, sold::incrementAndGet, stale::incrementAndGet));
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
