package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Rule 14 on real servers: a wrong address, a service that is not Redis, a server stopped (killed
 * by its PID) and frozen (SIGSTOP by its PID, SIGCONT after), with a live hold and with a waiter.
 * Each asserts the error's type and a bound: the options' 1 s unavailability bound plus the
 * margin written beside it (a loaded 2-core machine).
 */
class UnavailableTest extends OnServer {
    static final Duration BOUND = Duration.ofSeconds(1);
    static final LockOptions OPTIONS = LockOptions.defaults().unavailableAfter(BOUND);
    /** What a loaded machine may add to a bound: connects, thread wake-ups, a GC. */
    static final long MARGIN_MS = 1500;

    final List<AutoCloseable> closeLast = new CopyOnWriteArrayList<>();
    boolean frozen;

    @AfterEach
    void thaw() throws Exception {
        if (frozen) {
            signal("CONT");
        }
        for (int i = closeLast.size() - 1; i >= 0; i--) { // the last opened first: RedisLocks before its client
            closeLast.get(i).close();
        }
    }

    /** Runs {@code call}, asserts it threw the unavailable error naming {@code address}; its duration in ms. */
    static long unavailable(String address, Executable call) {
        long t0 = System.nanoTime();
        LockServiceUnavailableException e = assertThrows(LockServiceUnavailableException.class, call);
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertEquals(address, e.address());
        assertTrue(e.getMessage().startsWith("lock service unavailable at " + address + ": "), e.getMessage());
        System.out.println("after " + ms + " ms: " + e.getMessage()); // measured, in the class's -output.txt
        return ms;
    }

    /** {@link RedisLocks} on a client of {@code port} (closed after the test). */
    RedisLocks locksOn(int port) {
        RedisClient client = RedisClient.create(RedisURI.create("127.0.0.1", port));
        RedisLocks l = RedisLocks.create(client);
        closeLast.add(client::shutdown);
        closeLast.add(l);
        return l;
    }

    /** Every form of acquire fails as unavailable, within the bound and its margin. */
    void assertEveryAcquireUnavailable(int port) {
        String address = "127.0.0.1:" + port;
        RedisLocks l = locksOn(port);
        RedisLock lock = l.lock("k", OPTIONS);
        List<Executable> acquires = List.of(
                () -> l.acquire("k", Duration.ofSeconds(30), OPTIONS),
                () -> l.acquire("k", OPTIONS), // the default wait: without limit
                lock::lock,
                () -> lock.tryLock(30, TimeUnit.SECONDS),
                lock::tryLock, // tries once: unavailable at its first failure
                () -> l.tryAcquire("k", OPTIONS),
                () -> l.acquireAsync("k", Duration.ofSeconds(30), OPTIONS).join());
        // All at once, each on a thread of its own, each timed on its own.
        List<CompletableFuture<Long>> tries = acquires.stream().map(acquire -> CompletableFuture.supplyAsync(() -> unavailable(address, () -> {
            try {
                acquire.execute();
            } catch (java.util.concurrent.CompletionException e) {
                throw e.getCause();
            }
        }), r -> new Thread(r).start())).toList();
        for (CompletableFuture<Long> t : tries) {
            long ms = t.join();
            assertTrue(ms <= BOUND.toMillis() + MARGIN_MS, "unavailable after " + ms + " ms");
        }
    }

    @Test
    void rule14_aWrongAddressIsUnavailableWithinTheBound() {
        int closed = TestServer.freePort();
        String address = "127.0.0.1:" + closed;
        long ms = unavailable(address, () -> locksOn(closed).acquire("k", OPTIONS));
        // Retried from the first refusal until the bound: no earlier than it.
        assertTrue(ms >= BOUND.toMillis(), "retried for " + ms + " ms");
        assertEveryAcquireUnavailable(closed);
    }

    @Test
    void rule14_theDefaultBoundIsTenSeconds() {
        assertEquals(Duration.ofSeconds(10), LockOptions.defaults().unavailableAfter);
        assertThrows(IllegalArgumentException.class, () -> LockOptions.defaults().unavailableAfter(Duration.ZERO));
    }

    @Test
    void rule14_aServiceAnsweringHttpIsUnavailable() throws Exception {
        ServerSocket http = tinyServer(s -> {
            s.getInputStream().read(new byte[256]);
            OutputStream out = s.getOutputStream();
            out.write("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
        });
        assertEveryAcquireUnavailable(http.getLocalPort());
    }

    @Test
    void rule14_aServiceThatNeverAnswersIsUnavailable() throws Exception {
        ServerSocket silent = tinyServer(s -> {
            InputStream in = s.getInputStream();
            while (in.read(new byte[256]) >= 0) {
                // reads, never answers
            }
        });
        assertEveryAcquireUnavailable(silent.getLocalPort());
    }

    @Test
    void rule14_aRedisWithoutTheModuleIsUnavailable_atOnce() throws Exception {
        int port = TestServer.freePort();
        Process plain = new ProcessBuilder(TestServer.BINARY, "--port", String.valueOf(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no").redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        closeLast.add(() -> { // stopped by its PID
            plain.destroyForcibly();
            plain.waitFor();
        });
        assertTrue(TestServer.eventually(() -> {
            try {
                new Socket(InetAddress.getLoopbackAddress(), port).close();
                return true;
            } catch (IOException e) {
                return false;
            }
        }, 10_000), "the plain server listens");
        RedisLocks l = locksOn(port);
        // Not retried: the server answers, and will go on answering so.
        long ms = unavailable("127.0.0.1:" + port, () -> l.acquire("k", OPTIONS));
        assertTrue(ms < BOUND.toMillis(), "at once: " + ms + " ms");
        LockServiceUnavailableException e = assertThrows(LockServiceUnavailableException.class, () -> l.tryAcquire("k", OPTIONS));
        assertTrue(e.getMessage().contains("unknown command"), e.getMessage());
    }

    @Test
    void rule14_aStoppedServer_theHoldsCommandsAndAWaiterAreUnavailable() throws Exception {
        Hold hold = locks.acquire("k", Duration.ZERO, OPTIONS);
        Hold guarded = locks.acquire("g", Duration.ZERO, OPTIONS);
        Hold extended = locks.acquire("e", Duration.ZERO, OPTIONS);
        CompletableFuture<Long> waiter = waitWithoutLimit("k");
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        server.process.destroyForcibly(); // by its PID
        server.process.waitFor();
        String address = "127.0.0.1:" + server.port;
        assertTrue(waiterUnavailable(waiter) <= BOUND.toMillis() + MARGIN_MS);
        assertTrue(unavailable(address, hold::release) <= BOUND.toMillis() + MARGIN_MS);
        assertTrue(unavailable(address, () -> guarded.guard("SET", "x", "1")) <= BOUND.toMillis() + MARGIN_MS);
        assertTrue(unavailable(address, () -> extended.extend(Duration.ofSeconds(30))) <= BOUND.toMillis() + MARGIN_MS);
        assertFalse(hold.isLost(), "its 30 s lease has not ended: not lost, the server is unreachable");
    }

    @Test
    void rule14_aFrozenServer_theHoldsCommandsAndAWaiterAreUnavailable() throws Exception {
        Hold hold = locks.acquire("k", Duration.ZERO, OPTIONS);
        Hold guarded = locks.acquire("g", Duration.ZERO, OPTIONS);
        Hold extended = locks.acquire("e", Duration.ZERO, OPTIONS);
        CompletableFuture<Long> waiter = waitWithoutLimit("k");
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        signal("STOP");
        String address = "127.0.0.1:" + server.port;
        // A wait without limit is watched by PING every quarter bound: failed once none was
        // answered for a bound, so up to 1.25 bounds after the freeze.
        assertTrue(waiterUnavailable(waiter) <= BOUND.toMillis() * 5 / 4 + MARGIN_MS);
        assertTrue(unavailable(address, hold::release) <= BOUND.toMillis() + MARGIN_MS);
        assertTrue(unavailable(address, () -> guarded.guard("SET", "x", "1")) <= BOUND.toMillis() + MARGIN_MS);
        assertTrue(unavailable(address, () -> extended.extend(Duration.ofSeconds(30))) <= BOUND.toMillis() + MARGIN_MS);
    }

    @Test
    void rule14_theCallersDeadlineWhileTheServerIsFrozenIsUnavailable_notNotGranted() throws Exception {
        locks.acquire("k", Duration.ZERO, OPTIONS);
        RedisLocks connected = other();
        connected.acquire("w", Duration.ofSeconds(5)).release(); // its wait link connected, idle
        signal("STOP");
        String address = "127.0.0.1:" + server.port;
        // A 500 ms wait, shorter than the (default, 10 s) bound: its own reply is awaited min(1 s,
        // bound) past its end, then it is unavailable, not "not granted". Margin 800 ms: a timer's
        // tick and a wake-up on a loaded machine, less than the 1 s this once waited more.
        long ms = unavailable(address, () -> connected.acquire("k", Duration.ofMillis(500)));
        assertTrue(ms >= 500 && ms <= 500 + 1000 + 800, "after " + ms + " ms");
        // A client object not connected yet: its connect, too, ends then, not after the bound.
        ms = unavailable(address, () -> other().acquire("k", Duration.ofMillis(500)));
        assertTrue(ms >= 500 && ms <= 500 + 1000 + 800, "after " + ms + " ms");
    }

    @Test
    void theTryOnceForm_serverUnreachable_isUnavailableAtItsFirstFailure() {
        int closed = TestServer.freePort();
        String address = "127.0.0.1:" + closed;
        LockOptions fiveSeconds = LockOptions.defaults().unavailableAfter(Duration.ofSeconds(5));
        RedisLocks l = locksOn(closed);
        // One attempt, refused at once: not retried until the 5 s bound (margin 1.5 s: a loaded machine).
        assertTrue(unavailable(address, () -> l.tryAcquire("k", fiveSeconds)) < MARGIN_MS);
        assertTrue(unavailable(address, () -> l.lock("k", fiveSeconds).tryLock()) < MARGIN_MS);
        assertTrue(unavailable(address, () -> l.lock("k", fiveSeconds).tryLock(0, TimeUnit.SECONDS)) < MARGIN_MS);
    }

    @Test
    void aReleaseWhoseReplyIsLost_isUnavailable_andNeverSentAgain() throws Exception {
        CuttingProxy proxy = new CuttingProxy(server.port);
        closeLast.add(proxy);
        RedisLocks l = locksOn(proxy.port());
        Hold h = l.acquire("k", Duration.ZERO, OPTIONS.watchdog(false)); // no renewal: the release alone
        long releases = server.calls("lock.release");
        proxy.cutAfter("LOCK.RELEASE");
        long ms = unavailable("127.0.0.1:" + proxy.port(), h::release);
        assertTrue(ms <= BOUND.toMillis() + MARGIN_MS, "after " + ms + " ms");
        // A command after it on the same (reconnected) link: whatever Lettuce kept to send again has gone first.
        assertNotNull(l.tryAcquire("other"));
        assertEquals(releases + 1, server.calls("lock.release"), "sent once, never again");
        assertNull(server.info("k"), "the server ran it");
        assertFalse(h.release(), "released once already: nothing sent");
    }

    /** The extend to a 1 s ttl (its name and the ttl's RESP bytes, in one write): the proxy cuts its connection once it ran. */
    static final String[] EXTEND_TO_ONE_SECOND = {"LOCK.EXTEND", "$4\r\n1000\r\n"};
    /**
     * How long after an extend to 1 s is sent its effect is checked: the server's lease ends by 1 s
     * after it ran; rule 15's tested margin is 10% of the ttl + 100 ms (200 ms); 1.3 s more for a
     * loaded 2-core machine (the cut connection's error, thread wake-ups, a GC).
     */
    static final long CHECKED_AFTER_MS = 2500;

    /** An extend of {@code h} to 1 s whose reply is lost (cut by {@code proxy}): unavailable; the System.nanoTime() it was sent at. */
    static long extendToOneSecondReplyLost(CuttingProxy proxy, Hold h) {
        proxy.cutAfter(EXTEND_TO_ONE_SECOND);
        long sentAt = System.nanoTime();
        unavailable("127.0.0.1:" + proxy.port(), () -> h.extend(Duration.ofSeconds(1)));
        return sentAt;
    }

    static void sleepUntil(long nanoTime) throws InterruptedException {
        long ms = (nanoTime - System.nanoTime()) / 1_000_000;
        if (ms > 0) {
            Thread.sleep(ms);
        }
    }

    @Test
    void rule15_aFixedLeaseExtendedShorterWithItsReplyLost_isLostByTheNewTtl() throws Exception {
        CuttingProxy proxy = new CuttingProxy(server.port);
        closeLast.add(proxy);
        List<String> reasons = new CopyOnWriteArrayList<>();
        Hold h = locksOn(proxy.port()).acquire("k", Duration.ZERO,
                OPTIONS.ttl(Duration.ofSeconds(30)).watchdog(false).onLost((x, r) -> reasons.add(r)));
        long sentAt = extendToOneSecondReplyLost(proxy, h);
        // The extend may have run: its lease then ended 1 s later, not 30 s (rule 15).
        sleepUntil(sentAt + TimeUnit.MILLISECONDS.toNanos(CHECKED_AFTER_MS));
        assertEquals(List.of(Protocol.FIXED_LEASE_ENDED), reasons, "lost by " + CHECKED_AFTER_MS + " ms after the extend was sent");
        assertNull(server.info("k"), "the server ran the extend: its lease ended");
    }

    @Test
    void rule15_aRenewedHoldExtendedShorterWithItsReplyLost_isRenewedByTheNewTtlInTime() throws Exception {
        CuttingProxy proxy = new CuttingProxy(server.port);
        closeLast.add(proxy);
        Hold h = locksOn(proxy.port()).acquire("k", Duration.ZERO, OPTIONS.ttl(Duration.ofSeconds(30)));
        long sentAt = extendToOneSecondReplyLost(proxy, h);
        // The extend may have run, ending the lease 1 s later: the watchdog renews it before then
        // (its link reconnected), by the new ttl.
        sleepUntil(sentAt + TimeUnit.MILLISECONDS.toNanos(CHECKED_AFTER_MS));
        assertFalse(h.isLost(), String.valueOf(h.lostReason()));
        Map<String, Object> info = server.info("k");
        assertNotNull(info, "still held on the server");
        long ttl = (Long) info.get("ttl");
        assertTrue(ttl > 0 && ttl <= 1000, "renewed by the new ttl: " + ttl + " ms left");
    }

    /** How soon after the server freed a key its hold must be seen lost (ms): a loop timer 1 s late on a loaded machine. */
    static final long LOST_WITHIN_MS = 1000;

    @Test
    void rule20_aFixedLeaseExtendedTo10sAnsweredLate_andTo1sMeanwhile_isLostAsTheServerFreesIt() throws Exception {
        CuttingProxy proxy = new CuttingProxy(server.port);
        closeLast.add(proxy);
        List<String> reasons = new CopyOnWriteArrayList<>();
        Hold h = locksOn(proxy.port()).acquire("k", Duration.ZERO,
                OPTIONS.ttl(Duration.ofSeconds(30)).watchdog(false).onLost((x, r) -> reasons.add(r)));
        // The extend to 10 s runs at once; its reply (and what follows it) comes 0.5 s later.
        proxy.holdReplyAfter(500, "LOCK.EXTEND", "$5\r\n10000\r\n");
        CompletableFuture<Boolean> longer = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                longer.complete(h.extend(Duration.ofSeconds(10)));
            } catch (RuntimeException e) {
                longer.completeExceptionally(e);
            }
        });
        t.start();
        assertTrue(TestServer.eventually(() -> {
            Map<String, Object> info = server.info("k");
            long left = info == null ? 0 : (Long) info.get("ttl");
            return left > 5000 && left <= 10_000;
        }, 5000), "the extend to 10 s ran on the server");
        assertTrue(h.extend(Duration.ofSeconds(1)));
        assertTrue(longer.get(5, TimeUnit.SECONDS));
        assertTrue(TestServer.eventually(() -> server.info("k") == null, 5000), "the server freed it");
        // The client's deadline is never later than the server's (rule 15): the last extend the server ran is the 1 s one.
        assertTrue(TestServer.eventually(() -> !reasons.isEmpty(), LOST_WITHIN_MS),
                "lost within " + LOST_WITHIN_MS + " ms of the server freeing it");
        assertEquals(List.of(Protocol.FIXED_LEASE_ENDED), reasons);
    }

    @Test
    void aDurableGrantWhoseWaitGetsNoAnswer_isUnavailable_andTheGrantGivenBack() throws Exception {
        CuttingProxy proxy = new CuttingProxy(server.port);
        closeLast.add(proxy);
        RedisLocks l = locksOn(proxy.port());
        proxy.stallAfter("*3\r\n$4\r\nWAIT\r\n"); // the WAIT command, not LOCK.ACQUIRE's WAIT argument
        LockOptions durable = OPTIONS.replicas(1, Duration.ofMillis(300));
        long ms = unavailable("127.0.0.1:" + proxy.port(), () -> l.acquire("k", Duration.ofSeconds(5), durable));
        // Its 300 ms timeout, then min(1 s, bound), and the margin.
        assertTrue(ms >= 300 && ms <= 300 + 1000 + MARGIN_MS, "after " + ms + " ms");
        assertTrue(TestServer.eventually(() -> server.info("k") == null, 3000), "the grant given back");
    }

    @Test
    void aReleaseWhileARenewalIsInFlight_serverFrozen_isUnavailableWithinTheBound() throws Exception {
        Hold h = locks.acquire("k", Duration.ZERO, OPTIONS.ttl(Duration.ofSeconds(30)));
        long renewals = server.calls("lock.extend");
        h.extend(Duration.ofSeconds(3)); // renewed every second from now
        assertTrue(TestServer.eventually(() -> server.calls("lock.extend") > renewals + 1, 3000), "renewed once");
        signal("STOP");
        Thread.sleep(1300); // the next renewal was sent, and is not answered
        long ms = unavailable("127.0.0.1:" + server.port, h::release);
        assertTrue(ms <= BOUND.toMillis() + MARGIN_MS, "the renewal abandoned: " + ms + " ms");
    }

    @Test
    void rule14_theCallersDeadlineWhileTheServerAnswersIsNotGranted() throws Exception {
        locks.acquire("k", Duration.ZERO, OPTIONS);
        assertThrows(NotAcquiredException.class, () -> other().acquire("k", Duration.ofMillis(300), OPTIONS));
    }

    @Test
    void rule15_lostAtTheLeasesEnd_serverStopped() throws Exception {
        assertLostAtTheLeasesEnd(() -> {
            server.process.destroyForcibly(); // by its PID
            server.process.waitFor();
        });
    }

    @Test
    void rule15_lostAtTheLeasesEnd_serverFrozen() throws Exception {
        assertLostAtTheLeasesEnd(() -> signal("STOP"));
    }

    interface Outage {
        void begin() throws Exception;
    }

    /**
     * A 3 s lease renewed every second; after a renewal the server stops answering: the hold is
     * lost at the lease's end as the client computed it (the last successful renewal's send time
     * + ttl), by a timer: no earlier, and within 10% of the ttl + 100 ms after it. Then release
     * answers false at once and sends nothing, and leaving the scope throws the loss.
     */
    void assertLostAtTheLeasesEnd(Outage outage) throws Exception {
        long ttlMs = 3000;
        List<Long> lostAt = new CopyOnWriteArrayList<>();
        List<String> reasons = new CopyOnWriteArrayList<>();
        Hold h = locks.acquire("k", Duration.ZERO, OPTIONS.ttl(Duration.ofMillis(ttlMs)).onLost((x, r) -> {
            lostAt.add(System.nanoTime());
            reasons.add(r);
        }));
        long renewals = server.calls("lock.extend");
        assertTrue(TestServer.eventually(() -> server.calls("lock.extend") > renewals, 3000), "renewed once");
        long releases = server.calls("lock.release");
        long stoppedAt = System.nanoTime();
        outage.begin();
        assertTrue(TestServer.eventually(() -> !lostAt.isEmpty(), ttlMs + 3000), "lost");
        long end = h.leaseEnd();
        long lateMs = (lostAt.get(0) - end) / 1_000_000;
        long sinceOutageMs = (lostAt.get(0) - stoppedAt) / 1_000_000;
        System.out.println("lost " + lateMs + " ms after the lease's end, " + sinceOutageMs + " ms after the outage: " + reasons.get(0));
        assertTrue(lostAt.get(0) - end >= 0, "not before the lease's end");
        assertTrue(lateMs <= ttlMs / 10 + 100, "lost " + lateMs + " ms after the lease's end");
        assertTrue(sinceOutageMs <= ttlMs + ttlMs / 10 + 100, "the lease began before the outage: " + sinceOutageMs);
        assertTrue(reasons.get(0).startsWith("the server could not be reached before the lease ended: "), reasons.get(0));
        long t0 = System.nanoTime();
        assertFalse(h.release(), "a release of a lost hold: false");
        assertTrue(System.nanoTime() - t0 < 100_000_000L, "at once (100 ms: a thread wake-up on a loaded machine)");
        assertThrows(StaleTokenException.class, () -> h.guard("SET", "x", "1"));
        if (frozen) {
            signal("CONT");
            assertEquals(releases, server.calls("lock.release"), "nothing sent");
        }
    }

    /** Another {@link RedisLocks} on the test server. */
    RedisLocks other() {
        RedisLocks l = RedisLocks.create(server.client);
        closeLast.add(l);
        return l;
    }

    /** A waiter without limit on another client object, in a thread: the ms from its failure's cause. */
    CompletableFuture<Long> waitWithoutLimit(String key) {
        RedisLocks l = other();
        CompletableFuture<Long> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                l.lock(key, OPTIONS).lock();
                f.complete(null);
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        });
        t.setDaemon(true);
        t.start();
        return f;
    }

    /** The waiter ends with the unavailable error: how long it took from now. */
    static long waiterUnavailable(CompletableFuture<Long> waiter) throws Exception {
        long t0 = System.nanoTime();
        ExecutionException e = assertThrows(ExecutionException.class, () -> waiter.get(30, TimeUnit.SECONDS));
        assertInstanceOf(LockServiceUnavailableException.class, e.getCause());
        long ms = (System.nanoTime() - t0) / 1_000_000;
        System.out.println("the waiter after " + ms + " ms: " + e.getCause().getMessage());
        return ms;
    }

    void signal(String name) throws Exception {
        // By the server's PID, never by name.
        new ProcessBuilder("kill", "-" + name, String.valueOf(server.process.pid())).start().waitFor();
        frozen = name.equals("STOP");
    }

    interface Conversation {
        void with(Socket s) throws IOException;
    }

    /** A TCP server of the test's own on a loopback port: each connection has {@code conversation}. */
    ServerSocket tinyServer(Conversation conversation) throws IOException {
        ServerSocket server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        closeLast.add(server);
        Thread accept = new Thread(() -> {
            while (!server.isClosed()) {
                try {
                    Socket s = server.accept();
                    closeLast.add(s);
                    Thread t = new Thread(() -> {
                        try {
                            conversation.with(s);
                        } catch (IOException e) {
                            // the client hung up
                        }
                    });
                    t.setDaemon(true);
                    t.start();
                } catch (IOException e) {
                    return;
                }
            }
        });
        accept.setDaemon(true);
        accept.start();
        return server;
    }
}
