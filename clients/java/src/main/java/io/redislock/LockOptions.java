package io.redislock;

import java.time.Duration;
import java.util.Objects;

/**
 * How a lock is taken: its lease ({@code ttl}, 30 s by default), its owner (a fresh UUID unless
 * given: rule 1), whether the watchdog renews it (on by default; off for a fixed lease) and who is
 * told when it is lost. Immutable: each method returns a copy.
 */
public final class LockOptions {
    private static final LockOptions DEFAULTS = new LockOptions(Duration.ofSeconds(30), null, true, null);

    final Duration ttl;
    final String owner;
    final boolean watchdog;
    final LostListener onLost;

    private LockOptions(Duration ttl, String owner, boolean watchdog, LostListener onLost) {
        this.ttl = ttl;
        this.owner = owner;
        this.watchdog = watchdog;
        this.onLost = onLost;
    }

    public static LockOptions defaults() {
        return DEFAULTS;
    }

    public LockOptions ttl(Duration ttl) {
        if (ttl.toMillis() <= 0) {
            throw new IllegalArgumentException("ttl must be at least 1 ms");
        }
        return new LockOptions(ttl, owner, watchdog, onLost);
    }

    public LockOptions owner(String owner) {
        if (owner.isEmpty()) {
            throw new IllegalArgumentException("owner must not be empty");
        }
        return new LockOptions(ttl, owner, watchdog, onLost);
    }

    public LockOptions watchdog(boolean on) {
        return new LockOptions(ttl, owner, on, onLost);
    }

    public LockOptions onLost(LostListener listener) {
        return new LockOptions(ttl, owner, watchdog, Objects.requireNonNull(listener));
    }
}
