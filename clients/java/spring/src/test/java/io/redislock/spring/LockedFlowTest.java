package io.redislock.spring;

import static org.junit.jupiter.api.Assertions.*;

import io.redislock.TestServer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.integration.dsl.IntegrationFlow;
import org.springframework.integration.handler.advice.LockRequestHandlerAdvice;
import org.springframework.integration.support.MessageBuilder;
import org.springframework.messaging.MessageChannel;
import org.springframework.messaging.MessageHeaders;
import org.springframework.test.context.junit.jupiter.SpringJUnitConfig;

/**
 * A message flow run under the registry's locks: two flows (two application instances, {@link
 * TwoInstances}, each with its own registry) deposit into one balance with a read-modify-write, each step under
 * a {@link LockRequestHandlerAdvice} keyed by the message's account. The write is guarded by the
 * hold's token ({@code LOCK.GUARD}), which only the thread holding the lock has.
 */
@SpringJUnitConfig(LockedFlowTest.Config.class)
class LockedFlowTest {
    @Configuration
    static class Config extends TwoInstances {
        @Bean
        IntegrationFlow first() throws Exception {
            return deposits(firstRegistry(), server());
        }

        @Bean
        IntegrationFlow second() throws Exception {
            return deposits(secondRegistry(), server());
        }

        static IntegrationFlow deposits(ModuleLockRegistry registry, TestServer server) {
            LockRequestHandlerAdvice locked = new LockRequestHandlerAdvice(registry, m -> m.getHeaders().get("account"));
            locked.setWaitLockDuration(Duration.ofSeconds(10));
            return f -> f.handle(Long.class, (amount, headers) -> deposit(registry, server, amount, headers), e -> e.advice(locked));
        }

        static Object deposit(ModuleLockRegistry registry, TestServer server, long amount, MessageHeaders headers) {
            String account = headers.get("account", String.class);
            long balance = Long.parseLong(String.valueOf(server.cmd("GET", "balance:" + account)));
            // Only the thread that holds the account's lock has a token to guard the write with.
            registry.obtain(account).redisLock().guard("SET", "balance:" + account, String.valueOf(balance + amount));
            return null;
        }
    }

    @Autowired
    TestServer server;
    @Autowired
    @Qualifier("first.input") // the input channel of the flow "first"
    MessageChannel firstInput;
    @Autowired
    @Qualifier("second.input")
    MessageChannel secondInput;

    @Test
    void twoInstancesDepositUnderTheAccountsLock_noDepositLost() throws Exception {
        server.cmd("SET", "balance:acct-1", "0");
        ExecutorService threads = Executors.newFixedThreadPool(4);
        try {
            List<Future<?>> senders = new ArrayList<>();
            for (MessageChannel input : List.of(firstInput, secondInput, firstInput, secondInput)) {
                senders.add(threads.submit(() -> {
                    for (long amount = 1; amount <= 15; amount++) {
                        input.send(MessageBuilder.withPayload(amount).setHeader("account", "acct-1").build());
                    }
                }));
            }
            for (Future<?> s : senders) {
                s.get(60, TimeUnit.SECONDS);
            }
        } finally {
            threads.shutdownNow();
        }
        assertEquals(String.valueOf(4 * (15 * 16 / 2)), server.cmd("GET", "balance:acct-1"), "every deposit counted");
        assertNull(server.info("app:acct-1"), "every hold released");
    }
}
