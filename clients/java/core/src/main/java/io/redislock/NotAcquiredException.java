package io.redislock;

/** {@link RedisLocks#acquire} waited its whole wait time and was not granted. */
public final class NotAcquiredException extends RedisLockException {
    private static final long serialVersionUID = 1L;

    public NotAcquiredException(String key) {
        super("not granted within the wait time: " + key);
    }
}
