package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import io.redislock.jdbc.JdbcFence;
import io.redislock.jdbc.TestDatabase;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;

/**
 * The Java examples of the repository's README and of clients/java/README.md (but its Spring
 * section, which spring/'s ReadmeTest runs), run; and the check that each is code of this file,
 * word for word, but for the server's address: {@code "redis://localhost"} stands for the test
 * server's ({@link #uri}). The fenced-writes example runs on a SQLite database; the Install
 * section's whole program is {@code Example.java} beside this package (make test-install-java runs it).
 */
class ReadmeTest extends OnServer {
    /** What the examples log, in place of the application's logger. */
    final List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    final Log log = warnings::add;

    interface Log {
        void warn(String message);
    }

    String uri() {
        return "redis://127.0.0.1:" + server.port;
    }

    @Test
    void theClientReadmeExample() throws Exception {
        server.cmd("SET", "{sku:9}:stock", "10");
        String uri = uri();
        RedisClient client = RedisClient.create(uri);
        RedisLocks locks = RedisLocks.create(client);          // or RedisLocks.create(RedisClusterClient)

        // A Lock, as ReentrantLock is, across processes: the server's FIFO queue, a watchdog, a token.
        RedisLock lock = locks.lock("{sku:9}:lock");
        lock.lock();
        try {
            lock.guard("DECRBY", "{sku:9}:stock", "1");        // LOCK.GUARD: StaleTokenException once lost
        } finally {
            lock.unlock();                                     // LockLostException if the hold was lost
        }

        // A hold object for try-with-resources.
        try (Hold hold = locks.acquire("{sku:9}:lock", Duration.ofSeconds(5),
                LockOptions.defaults().ttl(Duration.ofSeconds(10)).onLost((h, reason) -> log.warn(reason)))) {
            long token = hold.token();                          // the fencing token, for writes elsewhere
        }

        assertEquals("9", server.cmd("GET", "{sku:9}:stock"), "the guarded write ran");
        assertNull(server.info("{sku:9}:lock"), "released");
        assertEquals(List.of(), warnings);
        locks.close();
        client.shutdown();
    }

    @Test
    void theFencedWritesExample() throws Exception {
        DataSource dataSource = TestDatabase.of(TestDatabase.Kind.SQLITE).dataSource();
        try (Connection c = dataSource.getConnection(); Statement s = c.createStatement()) {
            s.execute("CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL)");
            s.execute("INSERT INTO stock (sku, qty) VALUES ('sku9', 10)");
        }

        JdbcFence.createTable(dataSource);                     // once: CREATE TABLE IF NOT EXISTS lock_fences

        try (Hold hold = locks.acquire("{sku:9}:lock", Duration.ofSeconds(5))) {
            int left = JdbcFence.inTransaction(dataSource, hold, connection -> { // BEGIN; the fence, first
                try (PreparedStatement read = connection.prepareStatement("SELECT qty FROM stock WHERE sku = ?");
                     PreparedStatement write = connection.prepareStatement("UPDATE stock SET qty = ? WHERE sku = ?")) {
                    read.setString(1, "sku9");
                    int qty;
                    try (ResultSet rs = read.executeQuery()) {
                        rs.next();
                        qty = rs.getInt(1);
                    }
                    write.setInt(1, qty - 1);                  // read, decide, write: no token in them
                    write.setString(2, "sku9");
                    write.executeUpdate();
                    return qty - 1;
                }
            });                                                // COMMIT, or ROLLBACK on an exception
        } catch (StaleTokenException e) {
            // a newer holder has been in: rolled back before the body ran, nothing written
        }

        try (Connection c = dataSource.getConnection(); Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT (SELECT qty FROM stock), (SELECT count(*) FROM lock_fences)")) {
            assertTrue(rs.next());
            assertEquals(9, rs.getInt(1), "sold one: committed");
            assertEquals(1, rs.getInt(2), "the fence of {sku:9}:lock");
        }
        assertNull(server.info("{sku:9}:lock"), "released");
    }

    @Test
    void theElectionExample() throws Exception {
        Election election = locks.election("leader:billing", "node-1");     // node-1: this candidate's identity
        Observation observation = election.observe(leader ->                 // the current leader (or none), then each change
                log.warn("leader: " + leader.map(Leader::identity).orElse("none")));
        try (Leadership leadership = election.campaign()) {                  // waits in the key's queue
            leadership.onLost((l, reason) -> log.warn("no longer leader: " + reason));
            leadership.guard("SET", "billing:leader", "node-1");             // runs only while this term leads
            long term = leadership.term();                                    // larger than every earlier leader's
        }                                                                    // resigns: the next candidate leads at once

        assertEquals("node-1", server.cmd("GET", "billing:leader"), "the fenced write ran");
        assertNull(server.info("leader:billing"), "resigned");
        // The observer ends on the current state (none); it told node-1 if its first watch came
        // before the resign (a watch may miss leaders that came and went: rule 22).
        assertTrue(TestServer.eventually(() -> !warnings.isEmpty() && warnings.get(warnings.size() - 1).equals("leader: none"),
                3000), "the observer ends on none: " + warnings);
        observation.close();
        for (int i = 1; i < warnings.size(); i++) {
            assertNotEquals(warnings.get(i - 1), warnings.get(i), "never twice in a row: " + warnings);
        }
        assertFalse(warnings.stream().anyMatch(w -> w.startsWith("no longer")), "never lost: " + warnings);
    }

    @Test
    void theLockSetsExample() throws Exception {
        server.cmd("SET", "account:1:balance", "100");
        server.cmd("SET", "account:2:balance", "100");
        List<String> accounts = List.of("account:1", "account:2");          // any order: no deadlock
        try (MultiHold both = locks.acquireAll(accounts, Duration.ofSeconds(5))) {  // all or none
            both.guard("account:1", "DECRBY", "account:1:balance", "10");    // each key's own token
            both.guard("account:2", "INCRBY", "account:2:balance", "10");
            List<Long> tokens = both.tokens();                               // in the order of the keys
        }                                                                    // one LOCK.MRELEASE
        RedisMultiLock pair = locks.multiLock("account:1", "account:2");    // a java.util.concurrent.locks.Lock
        pair.lock();
        try {
            pair.hold().guard("account:2", "INCRBY", "account:2:balance", "1");
        } finally {
            pair.unlock();
        }

        assertEquals("90", server.cmd("GET", "account:1:balance"));
        assertEquals("111", server.cmd("GET", "account:2:balance"));
        assertNull(server.info("account:1"), "released");
        assertNull(server.info("account:2"), "released");
    }

    @Test
    void theRepositoryReadmeExample() throws Exception {
        server.cmd("SET", "{sku:9}:stock", "10");
        String uri = uri();
        RedisLocks locks = RedisLocks.create(RedisClient.create(uri));
        try (Hold hold = locks.acquire("{sku:9}:lock", Duration.ofSeconds(5))) { // FIFO queue, watchdog
            hold.guard("DECRBY", "{sku:9}:stock", "1"); // refused once the hold is gone
        }
        assertEquals("9", server.cmd("GET", "{sku:9}:stock"));
        locks.close();
    }

    @Test
    void everyJavaExampleIsCodeOfThisFile() throws Exception {
        String self = squeeze(Files.readString(Path.of("src/test/java/io/redislock/ReadmeTest.java"))
                + " " + Files.readString(Path.of("src/test/java/Example.java")));
        String client = Files.readString(Path.of("../README.md"));
        int spring = client.indexOf("\n## Spring Integration\n");
        int afterSpring = client.indexOf("\n## ", spring + 1);
        String outsideSpring = client.substring(0, spring) + client.substring(afterSpring);
        int checked = 0;
        for (String page : List.of(outsideSpring, Files.readString(Path.of("../../../README.md")))) {
            for (String block : javaBlocks(page)) {
                String code = squeeze(block.replace("RedisClient.create(\"redis://localhost\")", "RedisClient.create(uri)"));
                assertTrue(self.contains(code), "not code of ReadmeTest.java:\n" + block);
                checked++;
            }
        }
        assertEquals(6, checked, "every Java example is checked");
    }

    static List<String> javaBlocks(String page) {
        List<String> blocks = new ArrayList<>();
        for (int at = page.indexOf("```java\n"); at >= 0; at = page.indexOf("```java\n", at + 1)) {
            blocks.add(page.substring(at + 8, page.indexOf("\n```", at + 8)));
        }
        return blocks;
    }

    static String squeeze(String text) {
        return String.join(" ", text.trim().split("\\s+"));
    }
}
