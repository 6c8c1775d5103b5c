package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * Rule 6: one renewal loop per {@link RedisLocks}, on one connection of its own, however many
 * holds; releasing or losing one leaves the others renewed (rule 7).
 */
class RenewalLoopTest extends OnServer {
    static final int HOLDS = 1000;
    /** Renewed every 2 s: a renewal may come 4 s late before a lease ends (a JVM starved on a
     *  loaded 2-core machine stalled more than the 2 s that a 3 s lease allowed). */
    static final long TTL_MS = 6000;

    long connectedClients() {
        Matcher m = Pattern.compile("connected_clients:(\\d+)").matcher(String.valueOf(server.cmd("INFO", "clients")));
        assertTrue(m.find());
        return Long.parseLong(m.group(1));
    }

    @Test
    void aThousandHolds_oneConnectionAdded_noneLost_releasingOrLosingOneLeavesTheOthersRenewed() throws Exception {
        List<String> lost = new CopyOnWriteArrayList<>();
        LockOptions o = LockOptions.defaults().ttl(Duration.ofMillis(TTL_MS));
        assertTrue(locks.tryAcquire("warm", o.watchdog(false)).release()); // the command link connected
        long before = connectedClients();
        List<Hold> holds = new ArrayList<>();
        for (int i = 0; i < HOLDS; i++) {
            String key = "m:" + i;
            holds.add(locks.tryAcquire(key, o.onLost((h, r) -> lost.add(key + ": " + r))));
        }
        assertFalse(holds.contains(null), "all granted");
        long most = before;
        long end = System.nanoTime() + 2 * TTL_MS * 1_000_000L + 1_000_000_000L; // two leases and more
        while (System.nanoTime() < end) {
            most = Math.max(most, connectedClients());
            Thread.sleep(250);
        }
        // The watchdog's connection, and 1 of margin: a reconnect's new link before the old one is gone.
        assertTrue(most - before <= 2, "connections: " + before + " before, " + most + " with the holds");
        assertEquals(List.of(), lost, "none lost");
        assertEquals(HOLDS, locks.renewals.size(), "every hold in the one loop");

        assertTrue(holds.get(0).release());
        server.cmd("LOCK.RELEASE", "m:1", holds.get(1).owner()); // the server ends another one
        long after = System.nanoTime();
        assertTrue(TestServer.eventually(() -> !lost.isEmpty(), TTL_MS + 2000), "the other one is lost (its listener told)");
        assertEquals(List.of("m:1: the lease ran out before it was renewed"), lost);
        // Past a whole lease after that point, each other hold is still on the server: renewed since.
        Thread.sleep(Math.max(0, TTL_MS + 500 - (System.nanoTime() - after) / 1_000_000));
        for (int i = 2; i < HOLDS; i++) {
            assertNotNull(server.info("m:" + i), "m:" + i + " still held");
            assertFalse(holds.get(i).isLost(), "m:" + i);
        }
        assertEquals(1, lost.size(), "only the one: " + lost);
        assertEquals(HOLDS - 2, locks.renewals.size(), "the released and the lost left the loop");
        for (Hold h : holds.subList(2, HOLDS)) {
            assertTrue(h.release());
        }
        assertEquals(0, locks.renewals.size());
    }

    /** The command connection starts at create (off the caller's thread): a cold start is not in the first call's bound. */
    @Test
    void theCommandConnectionStartsConnectingAtCreate() throws Exception {
        // By the connection's id, not connected_clients: a connection of an earlier test may
        // still be closing and move the count while this one opens.
        Set<String> before = clientIds();
        try (RedisLocks l = RedisLocks.create(server.client)) {
            assertTrue(
                    TestServer.eventually(() -> !before.containsAll(clientIds()), 10_000), // 10 s: a cold connect at load 17 took 5.1 s
                    "connected before any call");
        }
    }

    /** The ids of the server's connections (CLIENT LIST). */
    Set<String> clientIds() {
        Set<String> ids = new HashSet<>();
        Matcher m = Pattern.compile("(?m)^id=(\\d+) ").matcher(String.valueOf(server.cmd("CLIENT", "LIST")));
        while (m.find()) {
            ids.add(m.group(1));
        }
        return ids;
    }
}
