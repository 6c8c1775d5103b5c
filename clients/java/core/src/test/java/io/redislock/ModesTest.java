package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Rule 9: shared holds, semaphores, session holds and durable grants. */
class ModesTest extends OnServer {
    @Test
    void readWriteLock_manyReadersOrOneWriter() throws Exception {
        RedisReadWriteLock rw = locks.readWriteLock("k");
        rw.readLock().lock();
        boolean otherReader = CompletableFuture.supplyAsync(() -> {
            boolean ok = rw.readLock().tryLock();
            Thread.yield();
            return ok;
        }).get(5, TimeUnit.SECONDS);
        assertTrue(otherReader, "a second reader fits beside the first");
        assertEquals("shared", server.info("k").get("mode"));
        assertEquals(2L, server.info("k").get("permits"));
        assertFalse(rw.writeLock().tryLock(), "no writer beside readers");
        rw.readLock().lock();
        assertEquals(2, rw.readLock().getHoldCount(), "reentrant");
        rw.readLock().unlock();
        rw.readLock().unlock();
        assertEquals(1L, server.info("k").get("permits"));
        assertThrows(StaleTokenException.class, () -> locks.tryAcquire("k", LockOptions.defaults().shared()).guard("SET", "x", "1"),
                "LOCK.GUARD accepts only the exclusive holder's token");
    }

    @Test
    void readWriteLock_aWriterQueuesBehindReadersAndReadersBehindIt() throws Exception {
        RedisReadWriteLock rw = locks.readWriteLock("k");
        Hold reader = locks.tryAcquire("k", LockOptions.defaults().shared());
        CompletableFuture<Long> writer = CompletableFuture.supplyAsync(() -> {
            try {
                assertTrue(rw.writeLock().tryLock(5, TimeUnit.SECONDS));
                long t = rw.writeLock().token();
                rw.writeLock().unlock();
                return t;
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
        });
        assertTrue(TestServer.eventually(() -> server.waiters("k") == 1, 3000));
        assertNull(locks.tryAcquire("k", LockOptions.defaults().shared()), "a new reader never overtakes a queued writer");
        assertTrue(reader.release());
        assertTrue(writer.get(5, TimeUnit.SECONDS) > reader.token());
    }

    @Test
    void semaphore_permitsAreLeasesOfTheirOwn() throws Exception {
        RedisSemaphore s = locks.semaphore("pool", 3);
        Hold two = s.acquire(2, Duration.ofSeconds(1));
        assertNull(s.tryAcquire(2));
        Hold one = s.tryAcquire(1);
        assertNotNull(one);
        assertNotEquals(two.owner(), one.owner());
        assertEquals("semaphore", server.info("pool").get("mode"));
        assertEquals(3L, server.info("pool").get("permits"));
        assertThrows(NotAcquiredException.class, () -> s.acquire(1, Duration.ofMillis(100)));
        two.close();
        try (Hold again = s.acquire(2, Duration.ofSeconds(1))) {
            assertEquals(3L, server.info("pool").get("permits"));
        }
        assertTrue(one.release());
        assertFalse(one.release(), "releasing twice releases once");
        assertNull(server.info("pool"));
    }

    @Test
    @SuppressWarnings("unchecked")
    void sessionHold_endsWithItsConnection() throws Exception {
        Hold h = locks.acquire("k", Duration.ofSeconds(1), LockOptions.defaults().session());
        List<Object> holders = (List<Object>) server.info("k").get("holders");
        List<Object> first = (List<Object>) holders.get(0);
        Object id = null;
        for (int i = 0; i + 1 < first.size(); i += 2) {
            if ("session".equals(first.get(i))) {
                id = first.get(i + 1);
            }
        }
        assertNotNull(id, "bound to a connection");
        assertTrue(h.release());
        assertNull(server.info("k"));
        String list = String.valueOf(server.cmd("CLIENT", "LIST"));
        assertFalse(list.contains("id=" + id + " "), "the session's connection closed with the hold");

        Hold s = locks.tryAcquire("k", LockOptions.defaults().session().watchdog(false));
        Map<String, Object> info = server.info("k");
        List<Object> h2 = (List<Object>) ((List<Object>) info.get("holders")).get(0);
        Object id2 = h2.get(h2.indexOf("session") + 1);
        server.cmd("CLIENT", "KILL", "ID", id2);
        assertTrue(TestServer.eventually(() -> server.info("k") == null, 2000), "a killed session releases at once");
        assertFalse(s.release());
    }

    @Test
    void durableGrant_withoutItsReplicasIsNotGrantedAndNothingHeld() throws Exception {
        assertThrows(NotAcquiredException.class,
                () -> locks.acquire("k", Duration.ofSeconds(1), LockOptions.defaults().replicas(1, Duration.ofMillis(200))));
        assertNull(server.info("k"), "released again");
        try (TestServer replica = new TestServer("--replicaof", "127.0.0.1", String.valueOf(server.port))) {
            assertTrue(TestServer.eventually(() -> String.valueOf(replica.cmd("INFO", "replication")).contains("master_link_status:up"), 10_000));
            try (Hold h = locks.acquire("k", Duration.ofSeconds(1), LockOptions.defaults().replicas(1, Duration.ofSeconds(2)))) {
                assertEquals(h.token(), replica.cmd("LOCK.FENCE", "k"), "the replica has the hold");
            }
        }
    }
}
