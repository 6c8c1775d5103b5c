package io.redislock.spring;

import static org.junit.jupiter.api.Assertions.*;

import io.redislock.TestServer;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.context.ApplicationListener;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.integration.leader.DefaultCandidate;
import org.springframework.integration.leader.event.AbstractLeaderEvent;
import org.springframework.integration.leader.event.OnRevokedEvent;
import org.springframework.integration.support.leader.LockRegistryLeaderInitiator;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.junit.jupiter.SpringJUnitConfig;

/**
 * Leader election in a Spring Integration context: two {@link LockRegistryLeaderInitiator}s, each
 * on a {@link ModuleLockRegistry} of its own ({@link TwoInstances}: two application instances, each
 * with its own client), on one server. Each test has a fresh context and server.
 */
@SpringJUnitConfig(LeaderElectionTest.Config.class)
@DirtiesContext(classMode = DirtiesContext.ClassMode.AFTER_EACH_TEST_METHOD)
class LeaderElectionTest {
    static final String ROLE = "poller";
    static final long HEARTBEAT_MS = 100;

    @Configuration
    static class Config extends TwoInstances {
        @Bean
        LockRegistryLeaderInitiator firstLeader() throws Exception {
            return initiator(firstRegistry(), "first");
        }

        @Bean
        LockRegistryLeaderInitiator secondLeader() throws Exception {
            return initiator(secondRegistry(), "second");
        }

        static LockRegistryLeaderInitiator initiator(ModuleLockRegistry registry, String id) {
            LockRegistryLeaderInitiator initiator = new LockRegistryLeaderInitiator(registry, new DefaultCandidate(id, ROLE));
            initiator.setHeartBeatMillis(HEARTBEAT_MS);
            initiator.setBusyWaitMillis(50);
            return initiator;
        }

        @Bean
        Events events() {
            return new Events();
        }
    }

    /** The leader events the initiators publish in the context. */
    static final class Events implements ApplicationListener<AbstractLeaderEvent> {
        final List<AbstractLeaderEvent> seen = new CopyOnWriteArrayList<>();

        @Override
        public void onApplicationEvent(AbstractLeaderEvent event) {
            seen.add(event);
        }

        long revoked(LockRegistryLeaderInitiator initiator) {
            return seen.stream().filter(e -> e instanceof OnRevokedEvent && e.getSource() == initiator).count();
        }
    }

    @Autowired
    TestServer server;
    @Autowired
    LockRegistryLeaderInitiator firstLeader;
    @Autowired
    LockRegistryLeaderInitiator secondLeader;
    @Autowired
    Events events;

    /**
     * Samples both contexts every millisecond: when the last sample that saw two leaders at once
     * began (NEVER if none did), and when the first and the last that saw one began.
     */
    static final long NEVER = Long.MIN_VALUE;
    final AtomicLong twoLeadersAt = new AtomicLong(NEVER);
    final AtomicLong firstOneLeaderAt = new AtomicLong(NEVER);
    final AtomicLong lastOneLeaderAt = new AtomicLong(NEVER);
    final AtomicBoolean sampling = new AtomicBoolean(true);
    Thread sampler;

    @BeforeEach
    void sample() {
        sampler = new Thread(() -> {
            while (sampling.get()) {
                long at = System.nanoTime();
                // Both, then the first again: a handoff between the two reads is not two leaders.
                boolean a = firstLeader.getContext().isLeader();
                boolean b = secondLeader.getContext().isLeader();
                if (a && b && firstLeader.getContext().isLeader()) {
                    twoLeadersAt.accumulateAndGet(at, Math::max);
                } else if (a || b) {
                    firstOneLeaderAt.compareAndSet(NEVER, at);
                    lastOneLeaderAt.accumulateAndGet(at, Math::max);
                }
                try {
                    Thread.sleep(1);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        sampler.setDaemon(true);
        sampler.start();
    }

    @AfterEach
    void stopSampling() throws InterruptedException {
        sampling.set(false);
        sampler.join();
    }

    int leaders() {
        return (firstLeader.getContext().isLeader() ? 1 : 0) + (secondLeader.getContext().isLeader() ? 1 : 0);
    }

    LockRegistryLeaderInitiator leader() {
        return firstLeader.getContext().isLeader() ? firstLeader : secondLeader;
    }

    @Test
    void oneLeaderAtATime_andTheOtherLeadsWhenTheLeaderStops() throws Exception {
        assertTrue(TestServer.eventually(() -> leaders() == 1, 5000), "a leader is elected");
        LockRegistryLeaderInitiator leader = leader();
        LockRegistryLeaderInitiator follower = leader == firstLeader ? secondLeader : firstLeader;
        Thread.sleep(1500); // 15 heartbeats: the leader stays the leader, the follower waits in the queue
        assertSame(leader, leader());
        assertEquals(1, leaders());
        assertTrue(TestServer.eventually(() -> server.waiters("app:" + ROLE) == 1, 3000), "the follower waits in the server's queue");

        long t0 = System.nanoTime();
        leader.stop();
        assertTrue(TestServer.eventually(() -> follower.getContext().isLeader(), 5000), "the other leads");
        long led = System.nanoTime();
        long handoffMs = (led - t0) / 1_000_000;
        // Handed off by the release: a release, a grant and the follower's next heartbeat (100 ms),
        // well before the lease (3 s) would have run out; the 2.4 s between is the margin for a
        // loaded machine.
        assertTrue(handoffMs < TwoInstances.TTL_MS - 500, "handed off in " + handoffMs + " ms");
        assertFalse(leader.getContext().isLeader());
        // The revocation is published by the stopped leader's thread, on a loaded machine maybe late.
        assertTrue(TestServer.eventually(() -> events.revoked(leader) == 1, 3000), "revoked: " + events.seen);
        Thread.sleep(300);
        assertEquals(1, events.revoked(leader), "revoked once: " + events.seen);
        // The sampler watched from before the stop until after the other led.
        assertTrue(firstOneLeaderAt.get() != NEVER && firstOneLeaderAt.get() < t0, "sampled before the stop");
        assertTrue(TestServer.eventually(() -> lastOneLeaderAt.get() > led, 3000), "sampled after the handoff");
        assertEquals(NEVER, twoLeadersAt.get(), "never two leaders at once");
    }

    @Test
    void aLostHoldRevokesTheLeader_andTheOtherLeads() throws Exception {
        assertTrue(TestServer.eventually(() -> leaders() == 1, 5000), "a leader is elected");
        LockRegistryLeaderInitiator leader = leader();
        LockRegistryLeaderInitiator follower = leader == firstLeader ? secondLeader : firstLeader;

        server.cmd("LOCK.FORCERELEASE", "app:" + ROLE); // the hold ends on the server, as after a long pause
        long t0 = System.nanoTime();
        assertTrue(TestServer.eventually(() -> follower.getContext().isLeader(), 5000), "the waiter is granted");
        // The old leader learns it from its next renewal (within a renewal period, 1 s) and a
        // heartbeat (100 ms): before its lease (3 s) would have ended; the 1.4 s between is the
        // margin for a late renewal on a loaded machine.
        assertTrue(TestServer.eventually(() -> !leader.getContext().isLeader(), TwoInstances.TTL_MS + 2000));
        long revoked = System.nanoTime();
        long revokedMs = (revoked - t0) / 1_000_000;
        assertTrue(revokedMs < TwoInstances.TTL_MS - 500, "revoked after " + revokedMs + " ms");
        assertTrue(TestServer.eventually(() -> events.revoked(leader) == 1, 3000), "revoked: " + events.seen);

        // From then on one leader: the old one queues behind the new one and does not take over.
        Thread.sleep(1000);
        assertTrue(twoLeadersAt.get() < revoked, "one leader at a time after the revocation");
        assertTrue(follower.getContext().isLeader());
        assertFalse(leader.getContext().isLeader());
        assertEquals(1, events.revoked(leader), "revoked once: " + events.seen);
    }
}
