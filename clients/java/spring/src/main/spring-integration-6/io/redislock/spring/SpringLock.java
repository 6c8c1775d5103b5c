package io.redislock.spring;

import java.time.Duration;
import java.util.concurrent.locks.Lock;

/**
 * What {@link ModuleLock} is to Spring Integration 6, which has no {@code DistributedLock}: a
 * {@link Lock} with the same two per-call-ttl methods as 7's, so one source serves both.
 */
interface SpringLock extends Lock {
    void lock(Duration ttl);

    boolean tryLock(Duration waitTime, Duration ttl) throws InterruptedException;
}
