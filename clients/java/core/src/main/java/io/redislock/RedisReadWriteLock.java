package io.redislock;

import java.util.UUID;
import java.util.concurrent.locks.ReadWriteLock;

/**
 * Shared and exclusive holds of one key ({@code SHARED}): many readers or one writer, served in the
 * server's FIFO queue. Each is a reentrant {@link RedisLock} by the owning thread. A thread that
 * holds the write lock must not ask for the read lock (it would wait for itself): unlike
 * {@link java.util.concurrent.locks.ReentrantReadWriteLock}, there is no downgrade.
 */
public final class RedisReadWriteLock implements ReadWriteLock {
    private final RedisLock read;
    private final RedisLock write;

    RedisReadWriteLock(RedisLocks locks, String key, LockOptions options) {
        String owner = options.owner != null ? options.owner : UUID.randomUUID().toString();
        this.read = new RedisLock(locks, key, options.shared(), owner + ":r");
        this.write = new RedisLock(locks, key, options, owner + ":w");
    }

    @Override
    public RedisLock readLock() {
        return read;
    }

    @Override
    public RedisLock writeLock() {
        return write;
    }
}
