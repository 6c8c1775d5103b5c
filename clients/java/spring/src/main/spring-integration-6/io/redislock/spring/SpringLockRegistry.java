package io.redislock.spring;

import org.springframework.integration.support.locks.ExpirableLockRegistry;
import org.springframework.integration.support.locks.RenewableLockRegistry;

/**
 * What {@link ModuleLockRegistry} is to Spring Integration 6, whose registries are not generic
 * ({@code obtain} returns a {@code Lock}; {@link ModuleLockRegistry#obtain} narrows it).
 */
interface SpringLockRegistry extends ExpirableLockRegistry, RenewableLockRegistry {
}
