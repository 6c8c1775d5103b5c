package io.redislock.spring;

import org.springframework.integration.support.locks.ExpirableLockRegistry;
import org.springframework.integration.support.locks.RenewableLockRegistry;

/**
 * What {@link ModuleLockRegistry} is to Spring Integration 7, whose registries are generic in their
 * lock. The 6.x twin (src/main/spring-integration-6) names the same interfaces without a type.
 */
interface SpringLockRegistry extends ExpirableLockRegistry<ModuleLock>, RenewableLockRegistry<ModuleLock> {
}
