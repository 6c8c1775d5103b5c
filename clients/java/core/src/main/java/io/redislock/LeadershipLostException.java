package io.redislock;

/**
 * The leadership ended before it was resigned (rule 21): a renewal answered 0, the lease ran out
 * (a frozen process, a lost link), or the session's connection broke. Thrown by {@link
 * Leadership#close()}, so the work done as leader can be undone; another candidate may have led
 * meanwhile, and its writes carry a larger term.
 */
public final class LeadershipLostException extends RedisLockException {
    private static final long serialVersionUID = 1L;

    public LeadershipLostException(String reason) {
        super("the leadership was lost: " + reason);
    }
}
