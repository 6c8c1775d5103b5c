package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.RedisClusterClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** RedisLocks.create(RedisClusterClient) on a 3-master cluster: routing by slot, waits, and a MOVED. */
class ClusterTest {
    static final List<TestServer> nodes = new ArrayList<>();
    static RedisClusterClient client;

    @BeforeAll
    static void start() throws Exception {
        for (int i = 0; i < 3; i++) {
            nodes.add(new TestServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"));
        }
        List<String> cmd = new ArrayList<>(List.of("redis-cli", "--cluster", "create"));
        for (TestServer n : nodes) {
            cmd.add("127.0.0.1:" + n.port);
        }
        cmd.addAll(List.of("--cluster-replicas", "0", "--cluster-yes"));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertEquals(0, p.waitFor(), out);
        for (TestServer n : nodes) {
            assertTrue(TestServer.eventually(() -> String.valueOf(n.cmd("CLUSTER", "INFO")).contains("cluster_state:ok"), 30_000));
        }
        client = RedisClusterClient.create(uris());
    }

    @AfterAll
    static void stop() {
        if (client != null) {
            client.shutdown(Duration.ZERO, Duration.ofSeconds(1));
        }
        nodes.forEach(TestServer::close);
    }

    static long slot(String key) {
        return (Long) nodes.get(0).cmd("CLUSTER", "KEYSLOT", key);
    }

    static String myId(TestServer n) {
        return String.valueOf(n.cmd("CLUSTER", "MYID"));
    }

    /** The node that serves the key's slot. */
    static TestServer ownerOf(String key) {
        long s = slot(key);
        for (TestServer n : nodes) {
            for (String line : String.valueOf(n.cmd("CLUSTER", "NODES")).split("\n")) {
                if (!line.contains("myself")) {
                    continue;
                }
                String[] f = line.split(" ");
                for (int i = 8; i < f.length; i++) {
                    String[] r = f[i].split("-");
                    if (r[0].startsWith("[")) {
                        continue;
                    }
                    long lo = Long.parseLong(r[0]);
                    long hi = r.length > 1 ? Long.parseLong(r[1]) : lo;
                    if (lo <= s && s <= hi) {
                        return n;
                    }
                }
            }
        }
        throw new AssertionError("nobody serves " + key);
    }

    @Test
    void aLockSetOfOneSlotIsTakenWaitedForAndRenewedOnItsMaster_crossSlotIsAnError() throws Exception {
        try (RedisLocks locks = RedisLocks.create(client); RedisLocks other = RedisLocks.create(client)) {
            for (String tag : List.of("{a}", "{b}", "{c}")) {
                List<String> keys = List.of(tag + ":2", tag + ":1");
                TestServer owner = ownerOf(keys.get(0));
                MultiHold set = locks.acquireAll(keys, Duration.ofSeconds(1), LockOptions.defaults().ttl(Duration.ofMillis(1500)));
                long renewals = owner.calls("lock.extend");
                for (String k : keys) {
                    assertEquals(set.token(k), owner.cmd("LOCK.FENCE", k), k);
                }
                assertEquals("OK", set.guard(tag + ":1", "SET", tag + ":balance", "5"));
                CompletableFuture<MultiHold> waiter = other.acquireAllAsync(List.of(tag + ":1", tag + ":2"), Duration.ofSeconds(5),
                        LockOptions.defaults());
                assertTrue(TestServer.eventually(() -> owner.waiters(tag + ":1") == 1, 3000), "queued on the slot's master");
                assertTrue(TestServer.eventually(() -> owner.calls("lock.extend") >= renewals + 2, 5000), "each member renewed");
                assertFalse(set.isLost());
                assertTrue(set.release());
                MultiHold next = waiter.get(5, TimeUnit.SECONDS);
                assertTrue(next.release());
                assertNull(owner.info(tag + ":1"));
            }
            RedisException e = assertThrows(RedisException.class,
                    () -> locks.tryAcquireAll(List.of("{a}:1", "{b}:1")), "keys of two slots");
            assertTrue(String.valueOf(e.getMessage()).contains("CROSSSLOT") || String.valueOf(e.getMessage()).contains("slot"),
                    e.getMessage());
        }
    }

    @Test
    void holdsWaitsAndGuardsOnTheKeysMaster() throws Exception {
        try (RedisLocks locks = RedisLocks.create(client)) {
            for (String key : List.of("{a}:lock", "{b}:lock", "{c}:lock")) {
                TestServer owner = ownerOf(key);
                // A 1.5 s lease, renewed every 500 ms: a renewal may come up to 1 s late.
                try (Hold h = locks.acquire(key, Duration.ofSeconds(1), LockOptions.defaults().ttl(Duration.ofMillis(1500)))) {
                    long renewals = owner.calls("lock.extend");
                    assertEquals(h.token(), owner.cmd("LOCK.FENCE", key), key);
                    String data = key.replace(":lock", ":stock");
                    assertEquals("OK", h.guard("SET", data, "5"));
                    assertEquals("5", owner.cmd("GET", data));
                    assertTrue(TestServer.eventually(() -> owner.calls("lock.extend") > renewals, 5000), "renewed on its master");
                    assertEquals(h.token(), owner.cmd("LOCK.FENCE", key), "still held on its master");
                    assertFalse(h.isLost());
                }
                assertNull(owner.info(key));
            }
            String key = "{b}:lock";
            TestServer owner = ownerOf(key);
            Hold holder = locks.acquire(key, Duration.ofSeconds(1));
            RedisLock waiter = locks.lock(key);
            AtomicReference<Thread> t = new AtomicReference<>();
            CompletableFuture<Boolean> f = new CompletableFuture<>();
            Thread th = new Thread(() -> {
                t.set(Thread.currentThread());
                try {
                    waiter.lockInterruptibly();
                    f.complete(true);
                } catch (Throwable e) {
                    f.completeExceptionally(e);
                }
            });
            th.start();
            assertTrue(TestServer.eventually(() -> owner.waiters(key) == 1, 3000), "waits on its master");
            th.interrupt();
            ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
            assertInstanceOf(InterruptedException.class, e.getCause());
            assertTrue(TestServer.eventually(() -> owner.waiters(key) == 0, 3000), "left the queue");
            assertTrue(holder.release());
        }
    }

    @Test
    void aDurableGrantCountsTheReplicasOfTheKeysMaster() throws Exception {
        TestServer master = ownerOf("{b}:lock");
        try (TestServer replica = new TestServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000")) {
            Process p = new ProcessBuilder("redis-cli", "--cluster", "add-node", "127.0.0.1:" + replica.port,
                    "127.0.0.1:" + master.port, "--cluster-slave", "--cluster-master-id", myId(master))
                    .redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes());
            assertEquals(0, p.waitFor(), out);
            assertTrue(TestServer.eventually(() -> String.valueOf(replica.cmd("INFO", "replication"))
                    .contains("master_link_status:up"), 20_000));
            LockOptions durable = LockOptions.defaults().replicas(1, Duration.ofMillis(300));
            try (RedisLocks locks = RedisLocks.create(client)) {
                for (String key : List.of("{a}:durable", "{b}:durable", "{c}:durable")) {
                    if (ownerOf(key) == master) {
                        locks.acquire(key, Duration.ZERO, durable).release();
                    } else {
                        assertThrows(NotAcquiredException.class, () -> locks.acquire(key, Duration.ZERO, durable),
                                key + ": its master has no replica");
                    }
                }
            } finally {
                String id = myId(replica);
                replica.close();
                for (TestServer n : nodes) {
                    n.cmd("CLUSTER", "FORGET", id);
                }
            }
        }
    }

    @Test
    void aMovedSlotIsFollowed() throws Exception {
        String key = "{moved}:lock";
        try (RedisLocks locks = RedisLocks.create(client)) {
            locks.acquire("{a}:warm", Duration.ofSeconds(1)).release(); // topology loaded, links open
            TestServer from = ownerOf(key);
            TestServer to = nodes.stream().filter(n -> n != from).findFirst().orElseThrow();
            long s = slot(key);
            String toId = myId(to);
            // The documented migration of an empty slot: IMPORTING, MIGRATING, then NODE everywhere.
            to.cmd("CLUSTER", "SETSLOT", s, "IMPORTING", myId(from));
            from.cmd("CLUSTER", "SETSLOT", s, "MIGRATING", toId);
            to.cmd("CLUSTER", "SETSLOT", s, "NODE", toId);
            from.cmd("CLUSTER", "SETSLOT", s, "NODE", toId);
            try (Hold h = locks.acquire(key, Duration.ofSeconds(2))) {
                assertEquals(h.token(), to.cmd("LOCK.FENCE", key), "granted by the slot's new master");
                RuntimeException moved = assertThrows(RuntimeException.class, () -> from.cmd("LOCK.FENCE", key));
                assertTrue(moved.getMessage().startsWith("MOVED"), "the old master redirects: " + moved.getMessage());
            }
            assertNull(to.info(key));
        }
    }

    /**
     * Issue 32's "release sent once" on a cluster: the key's master is announced behind a proxy
     * (cluster-announce-port), which drops the connection once the server ran LOCK.RELEASE. The
     * release is unavailable within its bound and never sent again on the reconnected node link.
     */
    @Test
    void aReleaseWhoseReplyIsLost_isUnavailable_andNeverSentAgain() throws Exception {
        String key = "{a}:cut";
        TestServer owner = ownerOf(key);
        String id = myId(owner);
        try (CuttingProxy proxy = new CuttingProxy(owner.port)) {
            announce(owner, id, proxy.port());
            RedisClusterClient viaProxy = RedisClusterClient.create(uris());
            try (RedisLocks locks = RedisLocks.create(viaProxy)) {
                LockOptions o = UnavailableTest.OPTIONS.watchdog(false); // no renewal: the release alone
                Hold h = locks.acquire(key, Duration.ZERO, o);
                long releases = owner.calls("lock.release");
                proxy.cutAfter("LOCK.RELEASE");
                String address = uris().stream().map(u -> u.getHost() + ":" + u.getPort()).collect(Collectors.joining(","));
                long ms = UnavailableTest.unavailable(address, h::release);
                assertTrue(ms <= UnavailableTest.BOUND.toMillis() + UnavailableTest.MARGIN_MS, "after " + ms + " ms");
                // A command after it on the same (reconnected) node link: whatever Lettuce kept to send again has gone first.
                assertNotNull(locks.tryAcquire("{a}:other", o));
                assertEquals(releases + 1, owner.calls("lock.release"), "sent once, never again");
                assertNull(owner.info(key), "the server ran it");
                assertFalse(h.release(), "released once already: nothing sent");
            } finally {
                viaProxy.shutdown(Duration.ZERO, Duration.ofSeconds(1));
                announce(owner, id, 0);
            }
        }
    }

    static List<RedisURI> uris() {
        return nodes.stream().map(n -> RedisURI.create("127.0.0.1", n.port)).toList();
    }

    /** Announces {@code node} on {@code port} (0: its own) and waits until every node's map says so. */
    static void announce(TestServer node, String id, int port) throws InterruptedException {
        node.cmd("CONFIG", "SET", "cluster-announce-port", port);
        String seen = ":" + (port == 0 ? node.port : port) + "@";
        for (TestServer n : nodes) {
            assertTrue(TestServer.eventually(() -> String.valueOf(n.cmd("CLUSTER", "NODES")).lines()
                    .anyMatch(l -> l.startsWith(id) && l.contains(seen)), 20_000), "the map shows " + seen);
        }
    }
}
