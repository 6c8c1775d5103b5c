package io.redislock.spring;

import io.redislock.RedisLock;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;

/**
 * The lock a {@link ModuleLockRegistry} hands out for one key: the core's {@link RedisLock} (the
 * server's FIFO queue, a watchdog, a fencing token; reentrant by the owning thread with one server
 * hold; {@link IllegalMonitorStateException} from {@link #unlock()} by another thread; {@link
 * io.redislock.LockLostException} from {@code unlock()} when the hold was lost), and when it was
 * last taken, for {@link ModuleLockRegistry#expireUnusedOlderThan}. On Spring Integration 7 a
 * {@code DistributedLock}: {@link #lock(Duration)} and {@link #tryLock(Duration, Duration)} take
 * the hold with a lease of their own.
 */
public final class ModuleLock implements SpringLock {
    private final RedisLock lock;
    private volatile long lastTaken = System.nanoTime();

    ModuleLock(RedisLock lock) {
        this.lock = lock;
    }

    /** The core's lock: its {@code token()}, {@code guard(...)}, {@code hold()} and hold count. */
    public RedisLock redisLock() {
        return lock;
    }

    /** The key on the server: the registry's prefix and the lock key. */
    public String key() {
        return lock.key();
    }

    @Override
    public void lock() {
        lock.lock();
        taken(true);
    }

    @Override
    public void lock(Duration ttl) {
        lock.lock(ttl);
        taken(true);
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        lock.lockInterruptibly();
        taken(true);
    }

    @Override
    public boolean tryLock() {
        return taken(lock.tryLock());
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return taken(lock.tryLock(time, unit));
    }

    @Override
    public boolean tryLock(Duration waitTime, Duration ttl) throws InterruptedException {
        return taken(lock.tryLock(waitTime, ttl));
    }

    @Override
    public void unlock() {
        lock.unlock();
    }

    /** Not supported, as {@link RedisLock#newCondition()}. */
    @Override
    public Condition newCondition() {
        return lock.newCondition();
    }

    private boolean taken(boolean granted) {
        if (granted) {
            lastTaken = System.nanoTime();
        }
        return granted;
    }

    /** Unused: no thread holds it and it was last taken (or made) at least {@code ageMs} ago. */
    boolean unusedFor(long ageMs, long now) {
        return !lock.isHeldByAnyThread() && now - lastTaken >= TimeUnit.MILLISECONDS.toNanos(ageMs);
    }

    @Override
    public String toString() {
        return "ModuleLock[" + key() + "]";
    }
}
