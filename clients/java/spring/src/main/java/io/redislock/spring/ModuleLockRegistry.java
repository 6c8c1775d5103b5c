package io.redislock.spring;

import io.redislock.Hold;
import io.redislock.LockLostException;
import io.redislock.LockOptions;
import io.redislock.RedisLocks;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

/**
 * A Spring Integration {@code LockRegistry} on the redis-lock module: {@link #obtain} gives, for
 * each key, one {@link ModuleLock} (the same object every time, as Spring's registries do) on the
 * server key {@code prefix + key}, taken with the registry's {@link LockOptions} (ttl, watchdog,
 * onLost). Use it wherever Spring Integration takes a {@code LockRegistry}:
 * {@code LockRegistryLeaderInitiator}, an aggregator's {@code lockRegistry},
 * {@code LockRequestHandlerAdvice}, {@code executeLocked(...)}.
 *
 * <p>Also an {@code ExpirableLockRegistry} ({@link #expireUnusedOlderThan}: the cache of lock
 * objects drops those no thread holds) and a {@code RenewableLockRegistry} ({@link #renewLock}:
 * {@code LOCK.EXTEND} of the calling thread's hold). No renewal scheduler is needed: the core's
 * watchdog renews every hold on a connection of its own unless the options turn it off, and
 * {@code setRenewalTaskScheduler} is left as the interface's no-op.
 *
 * <p>Named {@code ModuleLockRegistry}, not {@code RedisLockRegistry}: Spring Integration's own
 * {@code org.springframework.integration.redis.util.RedisLockRegistry} is another lock (a plain
 * key set with a script, waits by polling or pub/sub, one local {@code ReentrantLock} per key), and
 * the same simple name in an application's imports and bean definitions would hide which of the
 * two it runs on. Here waits are the server's FIFO queue, every hold has a fencing token, and a
 * lost hold is reported.
 */
public final class ModuleLockRegistry implements SpringLockRegistry {
    private final RedisLocks locks;
    private final String prefix;
    private final LockOptions options;
    private final ConcurrentMap<String, ModuleLock> cache = new ConcurrentHashMap<>();

    /** Locks on {@code prefix + key} with the default options (30 s ttl, watchdog on). */
    public ModuleLockRegistry(RedisLocks locks, String prefix) {
        this(locks, prefix, LockOptions.defaults());
    }

    /** Locks on {@code prefix + key} taken with {@code options}. */
    public ModuleLockRegistry(RedisLocks locks, String prefix, LockOptions options) {
        this.locks = Objects.requireNonNull(locks, "locks");
        this.prefix = Objects.requireNonNull(prefix, "prefix");
        this.options = Objects.requireNonNull(options, "options");
    }

    /**
     * The lock of {@code lockKey}, a {@link String} (as for Spring's Redis and JDBC registries: a
     * key of another type has no name the other processes would share).
     */
    @Override
    public ModuleLock obtain(Object lockKey) {
        return cache.computeIfAbsent(name(lockKey), k -> new ModuleLock(locks.lock(prefix + k, options)));
    }

    /**
     * Drops from the cache the lock objects that no thread holds and that were last taken (or made)
     * at least {@code age} ms ago; a later {@link #obtain} makes a new one. A thread still waiting
     * on a dropped object gets its hold on that object, as another owner would.
     */
    @Override
    public void expireUnusedOlderThan(long age) {
        long now = System.nanoTime();
        cache.values().removeIf(lock -> lock.unusedFor(age, now));
    }

    /**
     * Renews the calling thread's hold of {@code lockKey} by the lease it has ({@link Hold#ttl()}):
     * {@code LOCK.EXTEND}. {@link IllegalMonitorStateException} if the thread does not hold it,
     * {@link LockLostException} if the hold had ended (lost: {@code unlock()} throws it too).
     */
    @Override
    public void renewLock(Object lockKey) {
        Hold hold = held(lockKey);
        renew(hold, hold.ttl());
    }

    /** {@link #renewLock(Object)} with a new lease: it ends {@code ttl} from now, and the watchdog renews by it. */
    public void renewLock(Object lockKey, Duration ttl) {
        renew(held(lockKey), ttl);
    }

    private static void renew(Hold hold, Duration ttl) {
        if (!hold.extend(ttl)) {
            throw new LockLostException(hold.lostReason().orElse("the hold had ended"));
        }
    }

    private Hold held(Object lockKey) {
        ModuleLock lock = cache.get(name(lockKey));
        if (lock == null) {
            throw new IllegalMonitorStateException("the current thread does not hold " + prefix + lockKey);
        }
        return lock.redisLock().hold();
    }

    private static String name(Object lockKey) {
        if (!(lockKey instanceof String name)) {
            throw new IllegalArgumentException("a lock key is a String, not " + lockKey);
        }
        return name;
    }

    @Override
    public String toString() {
        return "ModuleLockRegistry[" + prefix + "*, " + cache.size() + " cached]";
    }
}
