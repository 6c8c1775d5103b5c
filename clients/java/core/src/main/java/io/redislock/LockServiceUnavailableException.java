package io.redislock;

/**
 * The lock service could not be reached, did not answer, or did not answer as Redis with the
 * redis-lock module loaded (rule 14): not "not granted", not "stale", not "lost". Thrown by an
 * acquire (whatever its wait), a release, an extend or a guarded write within the options'
 * {@link LockOptions#unavailableAfter unavailability bound}. What to do then (refuse the request,
 * or fall back knowingly) is the application's choice.
 */
public final class LockServiceUnavailableException extends RedisLockException {
    private static final long serialVersionUID = 1L;

    private final String address;

    public LockServiceUnavailableException(String address, Throwable cause) {
        super("lock service unavailable at " + address + ": " + describe(cause), cause);
        this.address = address;
    }

    /** The server's address as the Lettuce client was given it ({@code host:port}, or its Sentinels). */
    public String address() {
        return address;
    }

    private static String describe(Throwable cause) {
        // Lettuce's "Unable to connect to ..." says the address again; its cause says why.
        Throwable why = cause instanceof io.lettuce.core.RedisConnectionException && cause.getCause() != null
                ? cause.getCause() : cause;
        String m = why.getMessage();
        m = m == null || m.isEmpty() ? why.getClass().getSimpleName() : m;
        return why instanceof io.lettuce.core.protocol.RedisProtocolException ? "it does not answer as Redis: " + m : m;
    }
}
