package io.redislock;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The Java examples of the repository's README and of clients/java/README.md (but its Spring
 * section, which spring/'s ReadmeTest runs), run; and the check that each is code of this file,
 * word for word, but for the server's address: {@code "redis://localhost"} stands for the test
 * server's ({@link #uri}).
 */
class ReadmeTest extends OnServer {
    /** What the examples log, in place of the application's logger. */
    final List<String> warnings = new ArrayList<>();
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
        String self = squeeze(Files.readString(Path.of("src/test/java/io/redislock/ReadmeTest.java")));
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
        assertEquals(2, checked, "every Java example is checked");
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
