package io.redislock;

/** The hold ended before its release (rule 8): the work done under it may have overlapped another holder's. */
public final class LockLostException extends RedisLockException {
    private static final long serialVersionUID = 1L;

    public LockLostException(String reason) {
        super("the lock was lost: " + reason);
    }
}
