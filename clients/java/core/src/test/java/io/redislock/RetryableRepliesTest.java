package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.protocol.CommandArgs;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.Supplier;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Rule 19 for a release, an extend and a guarded write on a standalone connection: a reply of the
 * retryable list ({@code READONLY} here) says the server did not run the command, so it is asked
 * again, with the same owner and token, until the unavailability bound (rule 14).
 *
 * <p>How the hold's server answers {@code READONLY} while keeping the hold: a server that becomes
 * a replica loads its master's data, so the hold must be on that master too. A second server
 * ({@code other}) is made a replica of the hold's server and has the hold (its LOCK.FENCE); it is
 * promoted ({@code REPLICAOF NO ONE}) and the hold's server made its replica ({@code REPLICAOF}):
 * whether that sync is partial or full, its data is the hold's own again, and until it is promoted
 * back ({@code REPLICAOF NO ONE}) every write to it answers {@code READONLY}. The server's {@code
 * rejected_calls} of the command (INFO commandstats) says it was refused, so the test promotes it
 * only after a refusal, however slow the machine: no sleep decides it. (A {@code LOADING} from
 * {@code DEBUG RELOAD} lasts as long as the load, which a loaded machine makes unpredictable;
 * {@code CLIENT PAUSE} delays commands instead of refusing them.)
 */
class RetryableRepliesTest extends OnServer {
    /** The bound of the calls that succeed: promoted at once after the first refusal, far inside it. */
    static final Duration BOUND = Duration.ofSeconds(10);
    /** The bound of the calls that stay refused. */
    static final Duration SHORT_BOUND = Duration.ofSeconds(1);
    /** What a loaded 2-core machine may add to a bound: thread wake-ups, reconnects, a GC. */
    static final long MARGIN_MS = 1500;

    TestServer other;

    @BeforeEach
    void startOther() throws Exception {
        other = new TestServer();
    }

    @AfterEach
    void stopOther() {
        other.close();
    }

    /** A 30 s hold on {@code k} (no renewal ends it meanwhile), also on {@code other}. */
    Hold holdOnBoth(Duration bound) throws Exception {
        Hold h = locks.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofSeconds(30)).unavailableAfter(bound));
        for (TestServer s : List.of(server, other)) { // a sync starts at once, not 5 s later (the default)
            s.cmd("CONFIG", "SET", "repl-diskless-sync-delay", "0");
        }
        other.cmd("REPLICAOF", "127.0.0.1", server.port);
        assertTrue(TestServer.eventually(() -> String.valueOf(other.cmd("INFO", "replication")).contains("master_link_status:up"), 10_000),
                "the other server replicates the hold's");
        // (Not WAIT: it waits for the offset of its own client's last write, and the test's wrote nothing.)
        assertTrue(TestServer.eventually(() -> h.token() == (Long) other.cmd("LOCK.FENCE", "k"), 10_000), "the hold is on the other server");
        return h;
    }

    /** The hold's server made a replica of {@code other} (promoted first): it keeps the hold and answers READONLY. */
    void demote() {
        other.cmd("REPLICAOF", "NO", "ONE");
        server.cmd("REPLICAOF", "127.0.0.1", other.port);
        RuntimeException readOnly = assertThrows(RuntimeException.class, () -> server.cmd("SET", "probe", "x"));
        assertTrue(readOnly.getMessage().startsWith("READONLY"), readOnly.getMessage());
    }

    /** The hold's server a master again, with the hold (its sync from {@code other} done or not). */
    void promote() {
        server.cmd("REPLICAOF", "NO", "ONE");
    }

    /** How many times the server refused {@code command} (INFO commandstats' rejected_calls). */
    long rejected(String command) {
        String stats = String.valueOf(server.cmd("INFO", "commandstats"));
        var m = Pattern.compile("cmdstat_" + command.replace(".", "\\.") + ":[^\\r\\n]*rejected_calls=(\\d+)").matcher(stats);
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }

    static <T> CompletableFuture<T> inThread(Supplier<T> call) {
        return CompletableFuture.supplyAsync(call, r -> {
            Thread t = new Thread(r);
            t.setDaemon(true);
            t.start();
        });
    }

    /** Starts {@code call}, promotes the server once it refused {@code command}, and returns the call's answer. */
    <T> T refusedThenPromoted(String command, Supplier<T> call) throws Exception {
        long before = rejected(command);
        long t0 = System.nanoTime();
        CompletableFuture<T> f = inThread(call);
        assertTrue(TestServer.eventually(() -> rejected(command) > before, 5000), command + " refused as READONLY");
        assertFalse(f.isDone(), "still asking: " + (f.isDone() ? f.handle((v, e) -> v + " / " + e).join() : ""));
        promote();
        T answer = f.get(BOUND.toMillis() + MARGIN_MS, TimeUnit.MILLISECONDS);
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.println(command + " answered " + answer + " after " + ms + " ms"); // measured, in the class's -output.txt
        assertTrue(ms < BOUND.toMillis(), "within the bound: " + ms + " ms");
        return answer;
    }

    @Test
    void rule19_aReleaseAnsweredReadonly_isAskedAgain_untilThePromotedServerReleases() throws Exception {
        Hold h = holdOnBoth(BOUND);
        demote();
        assertEquals(true, refusedThenPromoted("lock.release", h::release), "the hold was live");
        assertNull(server.info("k"), "released on the promoted server");
    }

    @Test
    void rule19_anExtendAnsweredReadonly_isAskedAgain_untilThePromotedServerExtends() throws Exception {
        Hold h = holdOnBoth(BOUND);
        demote();
        assertEquals(true, refusedThenPromoted("lock.extend", () -> h.extend(Duration.ofSeconds(20))));
        assertFalse(h.isLost(), h.lostReason().orElse(""));
        assertEquals(Duration.ofSeconds(20), h.ttl());
        assertTrue(h.release());
    }

    @Test
    void rule19_aGuardedWriteAnsweredReadonly_isAskedAgain_untilThePromotedServerRunsIt() throws Exception {
        Hold h = holdOnBoth(BOUND);
        demote();
        assertEquals("OK", refusedThenPromoted("lock.guard", () -> h.guard("SET", "g", "v")));
        assertEquals("v", server.cmd("GET", "g"), "run once the server was promoted");
        assertTrue(h.release());
    }

    /**
     * The server stays a replica past the 1 s bound: a guarded write, an extend and a release each
     * fail as unavailable, the last READONLY reply as the cause, when the bound ends (not sooner)
     * and within it plus the margin.
     */
    @Test
    void rule19_aReplyStillRetryableWhenTheBoundEnds_isUnavailable_withTheReplyAsItsCause() throws Exception {
        Hold h = holdOnBoth(SHORT_BOUND);
        demote();
        List<Runnable> calls = List.of(() -> h.guard("SET", "g", "v"), h::extend, h::release);
        for (Runnable call : calls) {
            long t0 = System.nanoTime();
            LockServiceUnavailableException e = assertThrows(LockServiceUnavailableException.class, call::run);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            System.out.println("after " + ms + " ms: " + e.getMessage()); // measured, in the class's -output.txt
            assertInstanceOf(RedisCommandExecutionException.class, e.getCause());
            assertTrue(e.getCause().getMessage().startsWith("READONLY"), e.getCause().getMessage());
            assertTrue(e.getMessage().startsWith("lock service unavailable at 127.0.0.1:" + server.port + ": READONLY"), e.getMessage());
            assertTrue(ms >= SHORT_BOUND.toMillis(), "asked again until the bound: " + ms + " ms");
            assertTrue(ms < SHORT_BOUND.toMillis() + MARGIN_MS, "within the bound and its margin: " + ms + " ms");
        }
        assertNull(server.cmd("GET", "g"), "the guarded write never ran");
        promote();
        assertEquals(h.token(), server.cmd("LOCK.FENCE", "k"));
    }

    /**
     * Through Sentinel: the release is asked again on a connection reopened through the Sentinel,
     * which by then names the other server (the one the hold's server replicates, with the hold)
     * as the master. The Sentinel is told at once ({@code SENTINEL REMOVE}, then {@code SENTINEL
     * MONITOR} of the other server) rather than by a {@code SENTINEL FAILOVER}: a failover's own
     * demotion kills the old master's clients ({@code CLIENT KILL TYPE normal}), so they reconnect
     * to the new master before any {@code READONLY} could be seen; and its timing is the
     * Sentinel's. (Until its down-after period plus two INFO periods, about 21 s, a Sentinel takes
     * no action on a master that reports itself a replica; the test takes a few seconds.)
     */
    @Test
    void rule19_throughSentinel_aReleaseAnsweredReadonly_isAskedAgainOnTheCurrentMaster() throws Exception {
        for (TestServer s : List.of(server, other)) { // a sync starts at once, not 5 s later (the default)
            s.cmd("CONFIG", "SET", "repl-diskless-sync-delay", "0");
        }
        other.cmd("REPLICAOF", "127.0.0.1", server.port);
        assertTrue(TestServer.eventually(() -> String.valueOf(other.cmd("INFO", "replication")).contains("master_link_status:up"), 10_000),
                "the other server replicates the hold's");
        int sport = TestServer.freePort();
        Path dir = Files.createTempDirectory("redislock-java-sentinel-");
        Path conf = dir.resolve("sentinel.conf");
        Files.writeString(conf, String.join("\n", "port " + sport, "bind 127.0.0.1", "dir " + dir,
                "sentinel monitor m 127.0.0.1 " + server.port + " 1", "sentinel down-after-milliseconds m 1000", ""));
        Process sentinel = new ProcessBuilder(TestServer.BINARY, conf.toString(), "--sentinel")
                .redirectErrorStream(true).redirectOutput(dir.resolve("sentinel.log").toFile()).start();
        RedisClient sclient = RedisClient.create(RedisURI.create("127.0.0.1", sport));
        RedisClient client = RedisClient.create(RedisURI.Builder.sentinel("127.0.0.1", sport, "m").build());
        StatefulRedisConnection<String, String> s = null;
        try {
            for (long end = System.nanoTime() + 10_000_000_000L; s == null && System.nanoTime() < end;) {
                try {
                    s = sclient.connect(StringCodec.UTF8);
                } catch (RuntimeException e) {
                    Thread.sleep(25);
                }
            }
            assertNotNull(s, "the sentinel started");
            StatefulRedisConnection<String, String> sc = s;
            Function<String[], Object> sentinelCmd = args -> {
                CommandArgs<String, String> a = new CommandArgs<>(StringCodec.UTF8);
                for (int i = 1; i < args.length; i++) {
                    a.add(args[i]);
                }
                return sc.sync().dispatch(new Link.Name(args[0]), new AnyOutput(), a);
            };
            try (RedisLocks viaSentinel = RedisLocks.create(client)) {
                Hold h = viaSentinel.acquire("k", Duration.ZERO, LockOptions.defaults().ttl(Duration.ofSeconds(30)).unavailableAfter(BOUND));
                assertTrue(TestServer.eventually(() -> h.token() == (Long) other.cmd("LOCK.FENCE", "k"), 10_000),
                        "the hold is on the other server");
                demote();
                long before = rejected("lock.release");
                long t0 = System.nanoTime();
                CompletableFuture<Boolean> f = inThread(h::release);
                assertTrue(TestServer.eventually(() -> rejected("lock.release") > before, 5000), "refused as READONLY");
                assertFalse(f.isDone(), "still asking");
                sentinelCmd.apply(new String[] {"SENTINEL", "REMOVE", "m"});
                sentinelCmd.apply(new String[] {"SENTINEL", "MONITOR", "m", "127.0.0.1", String.valueOf(other.port), "1"});
                assertEquals(true, f.get(BOUND.toMillis() + MARGIN_MS, TimeUnit.MILLISECONDS), "released on the current master");
                long ms = (System.nanoTime() - t0) / 1_000_000;
                System.out.println("through Sentinel: lock.release answered after " + ms + " ms"); // measured
                assertTrue(ms < BOUND.toMillis(), "within the bound: " + ms + " ms");
                assertNull(other.info("k"), "released on the other server, now the master");
            }
        } finally {
            if (s != null) {
                s.close();
            }
            client.shutdown(Duration.ZERO, Duration.ofSeconds(1));
            sclient.shutdown(Duration.ZERO, Duration.ofSeconds(1));
            ProcessHandle.of(sentinel.pid()).ifPresent(ProcessHandle::destroyForcibly); // by its PID
            sentinel.waitFor();
        }
    }
}
