package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Rules 21 and 22 in one process: the campaign (a session hold of the identity, the term its
 * token, the queue's order, a bounded or cancelled campaign leaving the queue), resign, loss told
 * once, {@code leader()}, and the observation (the current leader first, then each change, a
 * broken link and a restarted server passed the last cursor). The processes killed and stopped
 * are {@link ElectionProcessesTest}'s.
 */
class ElectionTest extends OnServer {
    static final String KEY = "leader:billing";

    /** The exclusive holder's fields in LOCK.INFO (owner, token, ttl, held, session, ...). */
    @SuppressWarnings("unchecked")
    Map<String, Object> holder() {
        List<Object> holders = (List<Object>) server.info(KEY).get("holders");
        List<Object> h = (List<Object>) holders.get(0);
        Map<String, Object> m = new java.util.LinkedHashMap<>();
        for (int i = 0; i + 1 < h.size(); i += 2) {
            m.put(String.valueOf(h.get(i)), h.get(i + 1));
        }
        return m;
    }

    @Test
    void campaign_isASessionHoldOfTheIdentity_theTermItsToken_leaderNamesIt() throws Exception {
        Election election = locks.election(KEY, "node-1");
        assertEquals(Optional.empty(), election.leader(), "nobody leads yet");
        try (Leadership leadership = election.campaign()) {
            Map<String, Object> h = holder();
            assertEquals("node-1", h.get("owner"));
            assertEquals(leadership.term(), h.get("token"), "the term is the hold's token");
            assertNotNull(h.get("session"), "a session hold");
            long ttl = (Long) h.get("ttl");
            assertTrue(ttl > 9000 && ttl <= 10_000, "the default lease is 10 s: " + ttl);
            assertEquals(Optional.of(new Leader("node-1", leadership.term())), election.leader());
            assertEquals(Optional.of(new Leader("node-1", leadership.term())), locks.election(KEY, "node-2").leader(),
                    "any candidate sees the leader");
            assertEquals("OK", leadership.guard("SET", "billing:leader", "node-1"), "a fenced write by the term");
        }
        assertNull(server.info(KEY), "close() resigned");
        assertEquals(Optional.empty(), election.leader());
        assertThrows(IllegalArgumentException.class, () -> locks.election(KEY, ""));
        assertThrows(IllegalArgumentException.class, () -> election.ttl(Duration.ZERO));
    }

    @Test
    void theWatchdogKeepsALiveLeadersLeasePastSeveralLeases() throws Exception {
        // A 1.5 s lease renewed every 500 ms: a renewal may come up to 1 s late before the lease ends.
        Leadership leadership = locks.election(KEY, "node-1").ttl(Duration.ofMillis(1500)).campaign();
        Thread.sleep(3500); // more than two leases: without renewals it would end at 1.5 s
        assertFalse(leadership.isLost(), () -> "lost: " + leadership.lostReason());
        assertEquals(leadership.term(), holder().get("token"));
        assertTrue(leadership.resign());
    }

    @Test
    void resign_theNextCandidateInTheQueueLeadsAtOnce_withALargerTerm() throws Exception {
        Leadership first = locks.election(KEY, "node-1").campaign();
        CompletableFuture<Leadership> second = locks.election(KEY, "node-2").campaignAsync();
        CompletableFuture<Leadership> third = locks.election(KEY, "node-3").campaignAsync();
        assertTrue(TestServer.eventually(() -> server.waiters(KEY) == 2, 5000), "two queued");
        long resigned = System.nanoTime();
        assertTrue(first.resign());
        Leadership next = second.get(2, TimeUnit.SECONDS); // a handoff: milliseconds; 2 s margin for a loaded machine
        double ms = (System.nanoTime() - resigned) / 1e6;
        assertEquals("node-2", next.identity(), "the queue's order");
        assertTrue(next.term() > first.term());
        assertFalse(third.isDone(), "the third still waits");
        assertFalse(first.resign(), "a second resign: false, nothing sent");
        first.close(); // resigned already: no exception
        assertTrue(next.resign());
        assertEquals("node-3", third.get(2, TimeUnit.SECONDS).identity());
        third.join().close();
        System.err.println("election: resign -> next leader in " + ms + " ms (in-process)");
    }

    @Test
    void aBoundedOrCancelledCampaignLeavesTheQueue() throws Exception {
        Leadership leader = locks.election(KEY, "node-1").campaign();
        Election other = locks.election(KEY, "node-2");
        long asked = System.nanoTime();
        assertThrows(NotAcquiredException.class, () -> other.campaign(Duration.ofMillis(300)));
        assertTrue((System.nanoTime() - asked) / 1e6 >= 300, "it waited its wait");
        assertTrue(TestServer.eventually(() -> server.waiters(KEY) == 0, 3000), "left the queue");
        CompletableFuture<Leadership> async = other.campaignAsync();
        assertTrue(TestServer.eventually(() -> server.waiters(KEY) == 1, 3000));
        async.cancel(false);
        assertTrue(TestServer.eventually(() -> server.waiters(KEY) == 0, 3000), "a cancelled campaign left the queue");
        ExecutionExceptionCheck.notGranted(other.campaignAsync(Duration.ofMillis(200)));
        assertThrows(IllegalArgumentException.class, () -> other.campaign(Duration.ofMillis(-1)));
        assertTrue(leader.resign());
        Thread.sleep(100);
        assertNull(server.info(KEY), "nobody left in the queue was granted");
    }

    /** campaignAsync(wait) completes with NotAcquiredException when the wait ends. */
    static final class ExecutionExceptionCheck {
        static void notGranted(CompletableFuture<Leadership> f) throws InterruptedException {
            try {
                f.get(5, TimeUnit.SECONDS);
                fail("granted");
            } catch (java.util.concurrent.ExecutionException e) {
                assertInstanceOf(NotAcquiredException.class, e.getCause());
            } catch (java.util.concurrent.TimeoutException e) {
                fail("not answered in 5 s");
            }
        }
    }

    @Test
    void lostLeadership_isToldOnce_itsWritesAreStale_closeThrowsLeadershipLost() throws Exception {
        List<String> told = new CopyOnWriteArrayList<>();
        Leadership leadership = locks.election(KEY, "node-1").ttl(Duration.ofMillis(3000)).campaign();
        leadership.onLost((l, reason) -> told.add(l.term() + " " + reason));
        long term = leadership.term();
        assertEquals(1L, server.cmd("LOCK.FORCERELEASE", KEY));
        // The next renewal (within a third of the lease, 1 s) answers 0; 1.5 s margin for a
        // loaded machine, still before the lease's end (where the reason would be another).
        assertTrue(TestServer.eventually(() -> !told.isEmpty(), 1000 + 1500), "told it lost");
        assertEquals(term + " " + Protocol.RAN_OUT, told.get(0));
        assertTrue(leadership.isLost());
        assertThrows(StaleTokenException.class, () -> leadership.guard("SET", "billing:leader", "node-1"));
        List<String> late = new CopyOnWriteArrayList<>();
        leadership.onLost((l, reason) -> late.add(reason)); // added after: told at once
        assertEquals(List.of(Protocol.RAN_OUT), late);
        LeadershipLostException e = assertThrows(LeadershipLostException.class, leadership::close);
        assertEquals("the leadership was lost: " + Protocol.RAN_OUT, e.getMessage());
        Thread.sleep(1000); // a lease's worth more: a second signal would have come
        assertEquals(1, told.size(), "once: " + told);
    }

    /** The leaders an observation told, as "identity term" or "none". */
    static List<String> recording(List<String> into, Optional<Leader> leader) {
        into.add(leader.map(l -> l.identity() + " " + l.term()).orElse("none"));
        return into;
    }

    static boolean endsWith(List<String> seen, String last) {
        return !seen.isEmpty() && seen.get(seen.size() - 1).equals(last);
    }

    @Test
    void observe_theCurrentLeaderFirst_thenEachChange_neverTwiceInARow_untilClosed() throws Exception {
        Election election = locks.election(KEY, "node-1");
        List<String> seen = new CopyOnWriteArrayList<>();
        Observation observation = election.observe(l -> recording(seen, l));
        assertTrue(TestServer.eventually(() -> seen.equals(List.of("none")), 5000), "none first: " + seen);
        Leadership first = election.campaign();
        assertTrue(TestServer.eventually(() -> endsWith(seen, "node-1 " + first.term()), 2000), "" + seen);
        CompletableFuture<Leadership> second = locks.election(KEY, "node-2").campaignAsync();
        assertTrue(TestServer.eventually(() -> server.waiters(KEY) == 1, 3000));
        assertTrue(first.hold().extend(), "an extend is not a change");
        first.resign();
        Leadership next = second.get(2, TimeUnit.SECONDS);
        assertTrue(TestServer.eventually(() -> endsWith(seen, "node-2 " + next.term()), 2000), "" + seen);
        next.resign();
        assertTrue(TestServer.eventually(() -> endsWith(seen, "none"), 2000), "" + seen);
        assertEquals(List.of("none", "node-1 " + first.term(), "node-2 " + next.term(), "none"), seen);
        observation.close();
        Leadership after = election.campaign();
        Thread.sleep(500);
        assertEquals(4, seen.size(), "nothing told after close(): " + seen);
        after.resign();
    }

    @Test
    void observe_aKilledConnection_isConnectedAgain_withTheLastCursor() throws Exception {
        Election election = locks.election(KEY, "node-1");
        List<String> seen = new CopyOnWriteArrayList<>();
        Leadership first = election.campaign();
        try (Observation observation = election.observe(l -> recording(seen, l))) {
            assertTrue(TestServer.eventually(() -> seen.equals(List.of("node-1 " + first.term())), 5000), "" + seen);
            assertTrue(TestServer.eventually(() -> String.valueOf(server.cmd("CLIENT", "LIST")).contains("cmd=lock.watch"), 3000),
                    "blocked in LOCK.WATCH");
            server.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); // every link but the test's own
            Leadership second = locks.election(KEY, "node-2").campaign(Duration.ofSeconds(10)); // the session closed: free
            assertTrue(TestServer.eventually(() -> endsWith(seen, "node-2 " + second.term()), 3000), "" + seen);
            assertEquals(List.of("node-1 " + first.term(), "node-2 " + second.term()), seen);
            assertTrue(first.isLost() || !first.resign(), "the first lost its session");
            second.resign();
        }
    }

    @Test
    void observe_anotherTypeUnderTheKey_isToldAsFailed() throws Exception {
        server.cmd("HSET", KEY, "f", "v");
        List<RuntimeException> failed = new CopyOnWriteArrayList<>();
        try (Observation observation = locks.election(KEY, "node-1").observe(new LeaderListener() {
            @Override
            public void leader(Optional<Leader> leader) {
                fail("no leader in a hash");
            }

            @Override
            public void failed(RuntimeException error) {
                failed.add(error);
            }
        })) {
            assertTrue(TestServer.eventually(() -> !failed.isEmpty(), 5000));
            assertTrue(failed.get(0).getMessage().startsWith("WRONGTYPE"), failed.get(0).getMessage());
        }
    }

    /**
     * The server killed (SIGKILL) and started again on the same port with its data (an AOF written
     * on every command): the observation connects again, passes its last cursor and tells the
     * server's latest leader; a leader elected afterwards is told too.
     */
    @Test
    void observe_acrossAServerRestart_reportsTheServersLatestLeader() throws Exception {
        Process again = null;
        try (TestServer durable = new TestServer("--appendonly", "yes", "--appendfsync", "always");
                RedisLocks on = RedisLocks.create(durable.client)) {
            Election election = on.election(KEY, "node-1").ttl(Duration.ofSeconds(2)).unavailableAfter(Duration.ofSeconds(2));
            List<String> seen = new CopyOnWriteArrayList<>();
            Leadership first = election.campaign();
            try (Observation observation = election.observe(l -> recording(seen, l))) {
                assertTrue(TestServer.eventually(() -> endsWith(seen, "node-1 " + first.term()), 5000), "" + seen);
                durable.process.destroyForcibly(); // kill -9
                durable.process.waitFor();
                List<String> cmd = new ArrayList<>(List.of(TestServer.BINARY, "--port", String.valueOf(durable.port), "--bind",
                        "127.0.0.1", "--dir", durable.dir.toString(), "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                        "--loadmodule", TestServer.MODULE));
                again = new ProcessBuilder(cmd).redirectErrorStream(true)
                        .redirectOutput(ProcessBuilder.Redirect.appendTo(durable.dir.resolve("server.log").toFile())).start();
                // The server's latest leader, read on a client of the test's own once it answers.
                RedisClient check = RedisClient.create(RedisURI.create("127.0.0.1", durable.port));
                try {
                    String[] truth = new String[1];
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
                    // The restarted server keeps the session hold until its lease ends (its
                    // connection is unknown to it): node-1 then none. The observer must end on what
                    // the server says; 15 s: a restart, a reconnect (pauses up to 1 s), the lease.
                    boolean agreed = false;
                    while (!agreed && System.nanoTime() < until) {
                        try (var c = check.connect(io.lettuce.core.codec.StringCodec.UTF8)) {
                            Object r = c.sync().dispatch(new Link.Name("LOCK.WATCH"), new AnyOutput(),
                                    new io.lettuce.core.protocol.CommandArgs<>(io.lettuce.core.codec.StringCodec.UTF8).addKey(KEY));
                            truth[0] = Protocol.watched(r).leader().map(l -> l.identity() + " " + l.term()).orElse("none");
                            agreed = truth[0].equals("none") && endsWith(seen, "none");
                        } catch (RuntimeException e) {
                            // not up yet
                        }
                        Thread.sleep(50);
                    }
                    assertTrue(agreed, "the observer told the server's latest (" + truth[0] + "): " + seen + "\n"
                            + java.nio.file.Files.readString(durable.dir.resolve("server.log")));
                } finally {
                    check.shutdown();
                }
                Leadership second = on.election(KEY, "node-2").unavailableAfter(Duration.ofSeconds(5)).campaign(Duration.ofSeconds(10));
                assertTrue(second.term() > first.term(), "a larger term after the restart");
                assertTrue(TestServer.eventually(() -> endsWith(seen, "node-2 " + second.term()), 3000), "" + seen);
                List<String> leaders = seen.stream().filter(s -> !s.equals("none")).toList();
                assertEquals(List.of("node-1 " + first.term(), "node-2 " + second.term()), leaders, "in order of term");
                assertTrue(TestServer.eventually(first::isLost, 5000), "the first lost its session with the server");
                second.resign();
            }
        } finally {
            if (again != null) {
                again.destroyForcibly(); // by its PID
                again.waitFor();
            }
        }
    }
}
