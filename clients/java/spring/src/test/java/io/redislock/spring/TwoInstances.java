package io.redislock.spring;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.redislock.LockOptions;
import io.redislock.RedisLocks;
import io.redislock.TestServer;
import java.time.Duration;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.integration.config.EnableIntegration;

/**
 * The beans of the Spring Integration context tests (their configurations extend it): a test
 * server and two application instances on it, each a {@link ModuleLockRegistry} on a {@link
 * RedisLocks} over a client of its own, with leases of 3 s (renewed every 1 s: a renewal may come
 * 2 s late on a loaded machine before the lease ends).
 */
@Configuration
@EnableIntegration
class TwoInstances {
    static final long TTL_MS = 3000;
    static final LockOptions OPTIONS = LockOptions.defaults().ttl(Duration.ofMillis(TTL_MS));

    @Bean(destroyMethod = "close")
    TestServer server() throws Exception {
        return new TestServer();
    }

    @Bean(destroyMethod = "shutdown")
    RedisClient secondClient() throws Exception {
        return RedisClient.create(RedisURI.create("127.0.0.1", server().port));
    }

    @Bean(destroyMethod = "close")
    RedisLocks firstLocks() throws Exception {
        return RedisLocks.create(server().client);
    }

    @Bean(destroyMethod = "close")
    RedisLocks secondLocks() throws Exception {
        return RedisLocks.create(secondClient());
    }

    @Bean
    ModuleLockRegistry firstRegistry() throws Exception {
        return new ModuleLockRegistry(firstLocks(), "app:", OPTIONS);
    }

    @Bean
    ModuleLockRegistry secondRegistry() throws Exception {
        return new ModuleLockRegistry(secondLocks(), "app:", OPTIONS);
    }
}
