package io.redislock.spring;

import static org.junit.jupiter.api.Assertions.*;

import io.lettuce.core.RedisClient;
import io.redislock.Hold;
import io.redislock.LockOptions;
import io.redislock.RedisLocks;
import io.redislock.TestServer;
import io.redislock.jdbc.TestDatabase;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.locks.Lock;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.integration.config.EnableIntegration;
import org.springframework.integration.leader.DefaultCandidate;
import org.springframework.integration.support.leader.LockRegistryLeaderInitiator;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.PlatformTransactionManager;

/**
 * The examples of the "Spring Integration" section of clients/java/README.md, run; and the check
 * that every Java block of that section is code of this file, word for word. The fenced
 * transaction's runs on a SQLite database.
 */
class ReadmeTest {
    TestServer server;
    RedisClient client;
    final List<String> shipped = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        server = new TestServer();
        client = server.client;
    }

    @AfterEach
    void stop() {
        server.close();
    }

    void ship(String order) {
        shipped.add(order + " under " + server.cmd("LOCK.FENCE", "orders:" + order));
    }

    @Test
    void theRegistryExample() throws Exception {
        RedisLocks locks = RedisLocks.create(client);                  // one per application
        ModuleLockRegistry registry = new ModuleLockRegistry(locks, "orders:",
                LockOptions.defaults().ttl(Duration.ofSeconds(10)));

        Lock lock = registry.obtain("42");                             // the same object for "42" every time
        registry.executeLocked("42", Duration.ofSeconds(5), () -> ship("42")); // LOCK.ACQUIRE orders:42 ... WAIT 5000

        assertSame(lock, registry.obtain("42"));
        assertEquals(1, shipped.size());
        assertFalse(shipped.get(0).endsWith("null"), "shipped under a hold: " + shipped);
        assertNull(server.info("orders:42"), "released");
        locks.close();
    }

    @Configuration
    @EnableIntegration
    static class Leader {
        @Bean(destroyMethod = "close")
        RedisLocks locks(RedisClient client) {
            return RedisLocks.create(client);
        }

        @Bean
        ModuleLockRegistry registry(RedisLocks locks) {
            return new ModuleLockRegistry(locks, "app:");
        }

        @Bean
        LockRegistryLeaderInitiator leader(ModuleLockRegistry registry) {
            return new LockRegistryLeaderInitiator(registry, new DefaultCandidate("node-1", "poller"));
        }
    }

    @Test
    void theLeaderExample() throws Exception {
        try (AnnotationConfigApplicationContext context = new AnnotationConfigApplicationContext()) {
            context.registerBean(RedisClient.class, () -> client, d -> d.setDestroyMethodName(""));
            context.register(Leader.class);
            context.refresh();
            LockRegistryLeaderInitiator leader = context.getBean(LockRegistryLeaderInitiator.class);
            assertTrue(TestServer.eventually(() -> leader.getContext().isLeader(), 5000));
            assertNotNull(server.cmd("LOCK.FENCE", "app:poller"), "the leader holds app:poller");
        }
    }

    @Configuration
    static class Fenced {
        @Bean
        DataSource dataSource() {
            return TestDatabase.of(TestDatabase.Kind.SQLITE).dataSource();
        }

        @Bean
        PlatformTransactionManager transactionManager(DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }

        @Bean
        FencedTransactionTemplate fenced(PlatformTransactionManager transactionManager, DataSource dataSource) {
            return new FencedTransactionTemplate(transactionManager, dataSource);
        }
    }

    @Test
    void theFencedTransactionExample() throws Exception {
        try (AnnotationConfigApplicationContext context = new AnnotationConfigApplicationContext(Fenced.class)) {
            FencedTransactionTemplate fenced = context.getBean(FencedTransactionTemplate.class);
            JdbcTemplate jdbc = new JdbcTemplate(context.getBean(DataSource.class));
            jdbc.execute("CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL)");
            jdbc.execute("CREATE TABLE lock_fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL)");
            jdbc.update("INSERT INTO stock (sku, qty) VALUES (?, ?)", "sku9", 10);
            RedisLocks locks = RedisLocks.create(client);

            try (Hold hold = locks.acquire("{sku:9}:lock", Duration.ofSeconds(5))) {
                fenced.execute(hold, status -> {                   // BEGIN; the fence, on this transaction's connection
                    int qty = jdbc.queryForObject("SELECT qty FROM stock WHERE sku = ?", Integer.class, "sku9");
                    return jdbc.update("UPDATE stock SET qty = ? WHERE sku = ?", qty - 1, "sku9");
                });                                                // COMMIT; StaleTokenException: rolled back
            }

            assertEquals(9, jdbc.queryForObject("SELECT qty FROM stock WHERE sku = ?", Integer.class, "sku9"));
            assertEquals(1, jdbc.queryForObject("SELECT count(*) FROM lock_fences WHERE name = ?", Integer.class,
                    "{sku:9}:lock"), "fenced");
            locks.close();
        }
    }

    @Test
    void everyJavaBlockOfTheSectionIsCodeOfThisFile() throws Exception {
        String readme = Files.readString(Path.of("../README.md"));
        int from = readme.indexOf("\n## Spring Integration\n");
        assertTrue(from >= 0, "the README has the section");
        int to = readme.indexOf("\n## ", from + 1);
        String section = readme.substring(from, to < 0 ? readme.length() : to);
        String self = squeeze(Files.readString(Path.of("src/test/java/io/redislock/spring/ReadmeTest.java")));
        int blocks = 0;
        for (int at = section.indexOf("```java\n"); at >= 0; at = section.indexOf("```java\n", at + 1)) {
            int end = section.indexOf("\n```", at + 8);
            String block = section.substring(at + 8, end);
            assertTrue(self.contains(squeeze(block)), "not code of ReadmeTest.java:\n" + block);
            blocks++;
        }
        assertEquals(4, blocks, "the section's examples are checked");
    }

    static String squeeze(String text) {
        return String.join(" ", text.trim().split("\\s+"));
    }
}
