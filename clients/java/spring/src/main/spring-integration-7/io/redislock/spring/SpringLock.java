package io.redislock.spring;

import org.springframework.integration.support.locks.DistributedLock;

/**
 * What {@link ModuleLock} is to Spring Integration 7: a {@link DistributedLock}, a lock with a
 * per-call ttl. The 6.x twin (src/main/spring-integration-6) declares the same two methods itself.
 */
interface SpringLock extends DistributedLock {
}
