package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.protocol.CommandArgs;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Rule 11: through a Sentinel-managed Lettuce client, a hold survives a failover on the new master. */
class SentinelTest {
    @Test
    void theWatchdogRenewsOnTheNewMasterAfterAFailover() throws Exception {
        try (TestServer master = new TestServer();
                TestServer replica = new TestServer("--replicaof", "127.0.0.1", String.valueOf(master.port))) {
            assertTrue(TestServer.eventually(() -> String.valueOf(replica.cmd("INFO", "replication")).contains("master_link_status:up"), 10_000));
            int sport = TestServer.freePort();
            Path dir = Files.createTempDirectory("redislock-java-sentinel-");
            Path conf = dir.resolve("sentinel.conf");
            Files.writeString(conf, String.join("\n", "port " + sport, "bind 127.0.0.1", "dir " + dir,
                    "sentinel monitor m 127.0.0.1 " + master.port + " 1", "sentinel down-after-milliseconds m 1000",
                    "sentinel failover-timeout m 5000", ""));
            Process sentinel = new ProcessBuilder(TestServer.BINARY, conf.toString(), "--sentinel")
                    .redirectErrorStream(true).redirectOutput(dir.resolve("sentinel.log").toFile()).start();
            RedisClient sclient = RedisClient.create(RedisURI.create("127.0.0.1", sport));
            RedisClient client = RedisClient.create(RedisURI.Builder.sentinel("127.0.0.1", sport, "m").build());
            try {
                StatefulRedisConnection<String, String> s = null;
                for (int i = 0; i < 200 && s == null; i++) {
                    try {
                        s = sclient.connect(StringCodec.UTF8);
                    } catch (RuntimeException e) {
                        Thread.sleep(25);
                    }
                }
                assertNotNull(s, "the sentinel started");
                StatefulRedisConnection<String, String> sc = s;
                assertTrue(TestServer.eventually(() -> String.valueOf(sc.sync().dispatch(new Link.Name("SENTINEL"), new AnyOutput(),
                        new CommandArgs<>(StringCodec.UTF8).add("REPLICAS").add("m"))).contains(String.valueOf(replica.port)), 15_000),
                        "the sentinel knows the replica");
                try (RedisLocks locks = RedisLocks.create(client)) {
                    Hold h = locks.acquire("k", Duration.ofSeconds(1), LockOptions.defaults().ttl(Duration.ofSeconds(30)));
                    // The lease outlasts the failover's window: until the Sentinel demotes the old master
                    // (seconds), both are masters and the watchdog renews the old one. With a 9 s ttl the
                    // new master's copy expired in that window and the hold was reported lost (rule 11).
                    assertEquals(h.token(), master.cmd("LOCK.FENCE", "k"));
                    assertTrue(TestServer.eventually(() -> h.token() == (Long) replica.cmd("LOCK.FENCE", "k"), 3000));
                    // NOGOODSLAVE until the Sentinel has the replica's INFO: asked again until it accepts.
                    assertTrue(TestServer.eventually(() -> "OK".equals(sc.sync().dispatch(new Link.Name("SENTINEL"), new AnyOutput(),
                            new CommandArgs<>(StringCodec.UTF8).add("FAILOVER").add("m"))), 20_000), "the Sentinel starts a failover");
                    assertTrue(TestServer.eventually(() -> ((List<?>) replica.cmd("ROLE")).get(0).equals("master"), 15_000), "failed over");
                    assertTrue(TestServer.eventually(() -> ((List<?>) master.cmd("ROLE")).get(0).equals("slave"), 20_000),
                            "the old master reconfigured as a replica");
                    Object infoAfter = replica.cmd("LOCK.INFO", "k");
                    long before = replica.calls("lock.extend");
                    assertTrue(TestServer.eventually(() -> replica.calls("lock.extend") > before, 15_000), "renewed on the new master; lost: " + h.lostReason()
                            + ", old master's extends " + master.calls("lock.extend") + ", role " + master.cmd("ROLE"));
                    Thread.sleep(2000);
                    assertFalse(h.isLost(), h.lostReason() + "; the new master's LOCK.INFO after the failover: " + infoAfter);
                    assertEquals(h.token(), replica.cmd("LOCK.FENCE", "k"));
                    assertTrue(h.release());
                    try (Hold next = locks.acquire("k", Duration.ofSeconds(2))) {
                        assertEquals(next.token(), replica.cmd("LOCK.FENCE", "k"), "new holds on the new master");
                    }
                }
                sc.close();
            } finally {
                client.shutdown(Duration.ZERO, Duration.ofSeconds(1));
                sclient.shutdown(Duration.ZERO, Duration.ofSeconds(1));
                ProcessHandle.of(sentinel.pid()).ifPresent(ProcessHandle::destroyForcibly);
                sentinel.waitFor();
            }
        }
    }
}
