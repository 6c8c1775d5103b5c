package io.redislock;

/** {@code LOCK.GUARD} refused the write ({@code STALE}): the token is no longer the live hold's. Nothing was run. */
public final class StaleTokenException extends RedisLockException {
    private static final long serialVersionUID = 1L;

    public StaleTokenException(String message) {
        super(message);
    }
}
