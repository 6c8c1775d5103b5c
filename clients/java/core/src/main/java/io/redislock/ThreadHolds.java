package io.redislock;

import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Function;
import java.util.function.Predicate;

/**
 * The thread side of this library's {@link java.util.concurrent.locks.Lock}s ({@link RedisLock},
 * {@link RedisMultiLock}; rule 10): the one hold each thread has, with its count. A re-entry
 * counts on the thread's hold (refused if it was lost), only the outermost unlock releases it.
 */
final class ThreadHolds<H> {
    /** Takes a new hold for the current thread: null if not granted within {@code waitMs}. */
    interface Take<H> {
        H take(long waitMs, boolean interruptible) throws InterruptedException;
    }

    private record Entry<H>(H hold, int[] count) {}

    private final Map<Thread, Entry<H>> held = new ConcurrentHashMap<>();
    private final Function<H, Optional<String>> lostReason;
    private final Predicate<H> release;
    /** What the lock is on, for {@link IllegalMonitorStateException}'s message. */
    private final String what;

    ThreadHolds(Function<H, Optional<String>> lostReason, Predicate<H> release, String what) {
        this.lostReason = lostReason;
        this.release = release;
        this.what = what;
    }

    /** Lock for the current thread: one more count on its hold, or a new hold from {@code take}. */
    boolean enter(Take<H> take, long waitMs, boolean interruptible) throws InterruptedException {
        Thread me = Thread.currentThread();
        Entry<H> e = held.get(me);
        if (e != null) {
            String lost = lostReason.apply(e.hold).orElse(null);
            if (lost != null) {
                throw new LockLostException(lost);
            }
            e.count[0]++;
            return true;
        }
        H h = take.take(waitMs, interruptible);
        if (h == null) {
            return false;
        }
        held.put(me, new Entry<>(h, new int[] {1}));
        return true;
    }

    /**
     * Releases one count; the outermost releases the hold. {@link IllegalMonitorStateException}
     * if the current thread holds none, {@link LockLostException} if it had been lost.
     */
    void exit() {
        Entry<H> e = held.get(Thread.currentThread());
        if (e == null) {
            throw new IllegalMonitorStateException("the current thread does not hold " + what);
        }
        if (--e.count[0] > 0) {
            return;
        }
        held.remove(Thread.currentThread());
        if (!release.test(e.hold)) {
            throw new LockLostException(lostReason.apply(e.hold).orElse("unknown"));
        }
    }

    /** The current thread's hold; {@link IllegalMonitorStateException} if it holds none. */
    H hold() {
        Entry<H> e = held.get(Thread.currentThread());
        if (e == null) {
            throw new IllegalMonitorStateException("the current thread does not hold " + what);
        }
        return e.hold;
    }

    boolean heldByCurrentThread() {
        return held.containsKey(Thread.currentThread());
    }

    boolean heldByAnyThread() {
        return !held.isEmpty();
    }

    int count() {
        Entry<H> e = held.get(Thread.currentThread());
        return e == null ? 0 : e.count[0];
    }
}
