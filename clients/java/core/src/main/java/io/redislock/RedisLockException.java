package io.redislock;

/** The base of every exception of this library. */
public class RedisLockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public RedisLockException(String message) {
        super(message);
    }

    public RedisLockException(String message, Throwable cause) {
        super(message, cause);
    }
}
