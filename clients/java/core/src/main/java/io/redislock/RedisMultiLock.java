package io.redislock;

import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A {@link Lock} on every key of a lock set (rule 23): {@link #lock()} takes all of them in one
 * step or none ({@code LOCK.MACQUIRE ... WAIT}, in every key's queue at once: no deadlock whatever
 * the order of the keys, which are never sorted). {@link java.util.concurrent.locks.ReentrantLock}
 * semantics as {@link RedisLock}: the owning thread may lock it again (one server hold of the set,
 * a hold count), only the owning thread unlocks it; each thread has its own owner ({@code
 * <uuid>:<thread id>}).
 */
public final class RedisMultiLock implements Lock {
    private final RedisLocks locks;
    private final List<String> keys;
    private final String owner;
    private final LockOptions options;
    private final ThreadHolds<MultiHold> held;

    RedisMultiLock(RedisLocks locks, List<String> keys, LockOptions options) {
        this.locks = locks;
        this.keys = keys;
        this.options = options;
        this.owner = options.owner != null ? options.owner : UUID.randomUUID().toString();
        this.held = new ThreadHolds<>(MultiHold::lostReason, MultiHold::release, "the lock set " + keys);
    }

    /** The keys, in the order they were given. */
    public List<String> keys() {
        return keys;
    }

    /** The owner the current thread holds (or would hold) the set as. */
    @SuppressWarnings("deprecation")
    public String owner() {
        return owner + ":" + Thread.currentThread().getId();
    }

    @Override
    public void lock() {
        try {
            enter(Long.MAX_VALUE, false);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        enter(Long.MAX_VALUE, true);
    }

    @Override
    public boolean tryLock() {
        try {
            return enter(-1, false);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    /** Waits up to {@code time} for every key; {@code time <= 0} tries once, as {@link Lock} says (rule 17). */
    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        Duration wait = Duration.ofNanos(unit.toNanos(time));
        return enter(wait.isNegative() || wait.isZero() ? 0 : LockOptions.ceilMillis(wait), true);
    }

    private boolean enter(long waitMs, boolean interruptible) throws InterruptedException {
        return held.enter((ms, interrupts) -> locks.takeAll(keys, owner(), options, ms, interrupts), waitMs, interruptible);
    }

    /**
     * Releases one hold count; the outermost releases every key (one {@code LOCK.MRELEASE}).
     * {@link IllegalMonitorStateException} if the current thread does not hold the set, {@link
     * LockLostException} if it had been lost before this release.
     */
    @Override
    public void unlock() {
        held.exit();
    }

    /** Not supported, as {@link RedisLock#newCondition()}. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("RedisMultiLock has no conditions");
    }

    public boolean isHeldByCurrentThread() {
        return held.heldByCurrentThread();
    }

    /** The current thread's hold of the set; {@link IllegalMonitorStateException} if it holds none. */
    public MultiHold hold() {
        return held.hold();
    }
}
