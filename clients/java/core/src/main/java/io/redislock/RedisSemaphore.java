package io.redislock;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;

/**
 * A counting semaphore of {@code limit} permits on one key ({@code LIMIT limit PERMITS n}). Each
 * acquire is a lease of its own: a {@link Hold} with a fresh owner, a lease, a watchdog and a
 * token, closed to give its permits back. A crashed JVM's permits come back when its leases end.
 */
public final class RedisSemaphore {
    private final RedisLocks locks;
    private final String key;
    private final int limit;
    private final LockOptions options;

    RedisSemaphore(RedisLocks locks, String key, int limit, LockOptions options) {
        this.locks = locks;
        this.key = key;
        this.limit = limit;
        this.options = options;
    }

    public int limit() {
        return limit;
    }

    /** Waits up to {@code wait} for {@code permits} permits; {@link NotAcquiredException} if not granted. */
    public Hold acquire(int permits, Duration wait) throws InterruptedException {
        return locks.acquire(key, wait, options.permits(limit, permits));
    }

    /** {@link #acquire} as a future, as {@link RedisLocks#acquireAsync} gives. */
    public CompletableFuture<Hold> acquireAsync(int permits, Duration wait) {
        return locks.acquireAsync(key, wait, options.permits(limit, permits));
    }

    /** {@code permits} permits if they fit now, else null. */
    public Hold tryAcquire(int permits) {
        return locks.tryAcquire(key, options.permits(limit, permits));
    }
}
