package io.redislock;

import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * An exclusive lock (or, as {@link RedisReadWriteLock#readLock()}, a shared one) on one key with {@link java.util.concurrent.locks.ReentrantLock} semantics
 * across processes: the owning thread may lock it again (one server hold, one token, a hold count:
 * rule 10), only the owning thread unlocks it (others get {@link IllegalMonitorStateException}).
 * Each thread of this object has its own owner ({@code <uuid>:<thread id>}), so threads of one
 * process queue in the server's FIFO queue like threads of different ones. Every method that
 * talks to the server throws {@link LockServiceUnavailableException} when it cannot be reached
 * within the options' {@link LockOptions#unavailableAfter bound}, {@link #lock()} included.
 */
public final class RedisLock implements Lock {
    private final RedisLocks locks;
    private final String key;
    private final String owner;
    private final LockOptions options;
    private final ThreadHolds<Hold> held;

    RedisLock(RedisLocks locks, String key, LockOptions options) {
        this(locks, key, options, options.owner != null ? options.owner : UUID.randomUUID().toString());
    }

    RedisLock(RedisLocks locks, String key, LockOptions options, String owner) {
        this.locks = locks;
        this.key = key;
        this.owner = owner;
        this.options = options;
        this.held = new ThreadHolds<>(Hold::lostReason, Hold::release, key);
    }

    public String key() {
        return key;
    }

    /** The owner the current thread holds (or would hold) this lock as. */
    @SuppressWarnings("deprecation")
    public String owner() {
        return owner + ":" + Thread.currentThread().getId();
    }

    @Override
    public void lock() {
        lock(options.ttl);
    }

    /**
     * {@link #lock()} with a lease of {@code ttl} for this hold instead of the options' (the
     * watchdog, if on, renews by it). A re-entry counts on the hold the thread has, and its lease.
     */
    public void lock(Duration ttl) {
        LockOptions o = options.ttl(ttl);
        try {
            enter(Long.MAX_VALUE, false, o);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        enter(Long.MAX_VALUE, true, options);
    }

    @Override
    public boolean tryLock() {
        try {
            return enter(-1, false, options);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return tryLock(Duration.ofNanos(unit.toNanos(time)), options.ttl); // sub-ms kept: rounded up below
    }

    /** {@link #tryLock(long, TimeUnit)} with a lease of {@code ttl} for this hold, as {@link #lock(Duration)}. */
    public boolean tryLock(Duration wait, Duration ttl) throws InterruptedException {
        LockOptions o = options.ttl(ttl);
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        // In whole ms, rounded up (rule 17); time <= 0 tries once, as java.util.concurrent.locks.Lock.
        return enter(wait.isNegative() || wait.isZero() ? 0 : LockOptions.ceilMillis(wait), true, o);
    }

    private boolean enter(long waitMs, boolean interruptible, LockOptions o) throws InterruptedException {
        return held.enter((ms, interrupts) -> locks.take(key, owner(), o, ms, interrupts), waitMs, interruptible);
    }

    /**
     * Releases one hold count; the outermost releases the server hold. Throws {@link
     * IllegalMonitorStateException} if the current thread does not hold it, {@link LockLostException}
     * if the hold had been lost before this release.
     */
    @Override
    public void unlock() {
        held.exit();
    }

    /** Not supported: a condition would need the server to hand the lock back to a signalled waiter. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("RedisLock has no conditions");
    }

    /** Whether some thread holds this lock through this object (not: whether anyone holds the key). */
    public boolean isHeldByAnyThread() {
        return held.heldByAnyThread();
    }

    public boolean isHeldByCurrentThread() {
        return held.heldByCurrentThread();
    }

    public int getHoldCount() {
        return held.count();
    }

    /** The current thread's hold; {@link IllegalMonitorStateException} if it holds none. */
    public Hold hold() {
        return held.hold();
    }

    /** The fencing token of the current thread's hold. */
    public long token() {
        return hold().token();
    }

    public boolean isLost() {
        return hold().isLost();
    }

    /** {@link Hold#guard} with the current thread's hold. */
    public Object guard(String... command) {
        return hold().guard(command);
    }
}
