package io.redislock;

import java.time.Duration;
import java.util.Objects;

/**
 * How a lock is taken: its lease ({@code ttl}, 30 s by default), its owner (a fresh UUID unless
 * given: rule 1), whether the watchdog renews it (on by default; off for a fixed lease) and who is
 * told when it is lost. Immutable: each method returns a copy.
 */
public final class LockOptions {
    /** The default unavailability bound (rule 14). */
    static final Duration UNAVAILABLE_AFTER = Duration.ofSeconds(10);
    private static final LockOptions DEFAULTS = new LockOptions(Duration.ofSeconds(30), null, true, null, false, 0, 0, false,
            0, null, UNAVAILABLE_AFTER);

    final Duration ttl;
    final String owner;
    final boolean watchdog;
    final LostListener onLost;
    final boolean shared;
    final int limit;
    final int permits;
    final boolean session;
    final int replicas;
    final Duration replicaTimeout;
    final Duration unavailableAfter;

    private LockOptions(Duration ttl, String owner, boolean watchdog, LostListener onLost, boolean shared, int limit,
            int permits, boolean session, int replicas, Duration replicaTimeout, Duration unavailableAfter) {
        this.ttl = ttl;
        this.owner = owner;
        this.watchdog = watchdog;
        this.onLost = onLost;
        this.shared = shared;
        this.limit = limit;
        this.permits = permits;
        this.session = session;
        this.replicas = replicas;
        this.replicaTimeout = replicaTimeout;
        this.unavailableAfter = unavailableAfter;
    }

    private LockOptions with(Duration ttl, String owner, boolean watchdog, LostListener onLost) {
        return new LockOptions(ttl, owner, watchdog, onLost, shared, limit, permits, session, replicas, replicaTimeout, unavailableAfter);
    }

    /** A shared (read) hold: {@code SHARED}. */
    public LockOptions shared() {
        return new LockOptions(ttl, owner, watchdog, onLost, true, 0, 0, session, replicas, replicaTimeout, unavailableAfter);
    }

    /** {@code n} permits of a semaphore of {@code limit}: {@code LIMIT limit PERMITS n}. */
    public LockOptions permits(int limit, int n) {
        if (n < 1 || n > limit) {
            throw new IllegalArgumentException("need 1 <= permits <= limit");
        }
        return new LockOptions(ttl, owner, watchdog, onLost, false, limit, n, session, replicas, replicaTimeout, unavailableAfter);
    }

    /** A session hold ({@code SESSION}): released by the server when the hold's own connection closes. */
    public LockOptions session() {
        return new LockOptions(ttl, owner, watchdog, onLost, shared, limit, permits, true, replicas, replicaTimeout, unavailableAfter);
    }

    /**
     * A durable grant: after it, {@code WAIT n timeout}; when fewer replicas acknowledge in time the
     * hold is released and the acquire reports not granted.
     */
    public LockOptions replicas(int n, Duration timeout) {
        return new LockOptions(ttl, owner, watchdog, onLost, shared, limit, permits, session, n, timeout, unavailableAfter);
    }

    /** The mode words of LOCK.ACQUIRE after the ttl. */
    java.util.List<Object> modeArgs() {
        java.util.List<Object> a = new java.util.ArrayList<>();
        if (shared) {
            a.add("SHARED");
        }
        if (limit > 0) {
            a.add("LIMIT");
            a.add((long) limit);
            a.add("PERMITS");
            a.add((long) permits);
        }
        if (session) {
            a.add("SESSION");
        }
        return a;
    }

    public static LockOptions defaults() {
        return DEFAULTS;
    }

    /**
     * The lease, at least 1 ms; sent in whole milliseconds, rounded up (a lease is never shorter
     * than asked: 1.5 ms is a 2 ms lease).
     */
    public LockOptions ttl(Duration ttl) {
        return with(checkTtl(ttl), owner, watchdog, onLost);
    }

    /** {@code ttl} if it is at least 1 ms, else {@link IllegalArgumentException} (rule 17). */
    static Duration checkTtl(Duration ttl) {
        if (ttl.compareTo(Duration.ofMillis(1)) < 0) {
            throw new IllegalArgumentException("ttl must be at least 1 ms, not " + ttl);
        }
        return ttl;
    }

    /** A duration in whole milliseconds, rounded up. */
    static long ceilMillis(Duration d) {
        long ms = d.toMillis();
        return d.minusMillis(ms).isZero() ? ms : ms + 1;
    }

    /**
     * The unavailability bound (rule 14; 10 s by default): how long connection errors and a server
     * that does not answer are retried and waited for before an acquire, release, extend or guarded
     * write of these options fails with {@link LockServiceUnavailableException}, counted from the
     * first failure; a wait longer than it is watched by {@code PING} at least every half bound.
     */
    public LockOptions unavailableAfter(Duration bound) {
        if (bound.compareTo(Duration.ofMillis(1)) < 0) {
            throw new IllegalArgumentException("unavailableAfter must be at least 1 ms, not " + bound);
        }
        return new LockOptions(ttl, owner, watchdog, onLost, shared, limit, permits, session, replicas, replicaTimeout, bound);
    }

    public LockOptions owner(String owner) {
        if (owner.isEmpty()) {
            throw new IllegalArgumentException("owner must not be empty");
        }
        return with(ttl, owner, watchdog, onLost);
    }

    public LockOptions watchdog(boolean on) {
        return with(ttl, owner, on, onLost);
    }

    /** These options without their listener: a set's members, whose loss their set reports once (rule 23). */
    LockOptions withoutOnLost() {
        return with(ttl, owner, watchdog, null);
    }

    public LockOptions onLost(LostListener listener) {
        return with(ttl, owner, watchdog, Objects.requireNonNull(listener));
    }
}
