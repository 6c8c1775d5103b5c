package io.redislock;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.RejectedExecutionException;

/**
 * One hold of a lock set (rule 23): every key of the set, taken in one step by {@code
 * LOCK.MACQUIRE}, each key a {@link Hold} of its own with its own fencing token, renewed by the
 * one renewal loop of its {@link RedisLocks} (rule 6, {@code LOCK.EXTEND key owner ttl TOKEN
 * token} in the same pipelines as every other renewal). The set is lost once when any member is
 * (rule 8; the reason names the key), and the members still held are then released with one
 * {@code LOCK.MRELEASE}, so a set is never left half held. Close it (try-with-resources) or
 * {@link #release()} it; {@link #close()} throws {@link LockLostException} when the set had been
 * lost, so the work done under it can be rolled back.
 *
 * <pre>{@code
 * try (MultiHold accounts = locks.acquireAll(List.of("account:1", "account:2"), Duration.ofSeconds(5))) {
 *     accounts.guard("account:1", "DECRBY", "account:1:balance", "10");
 *     accounts.guard("account:2", "INCRBY", "account:2:balance", "10");
 * }
 * }</pre>
 */
public final class MultiHold implements AutoCloseable {
    /** Called once, on the library's thread that saw the loss, when a lock set is lost. Keep it short. */
    @FunctionalInterface
    public interface LostListener {
        void lost(MultiHold set, String reason);
    }

    private final RedisLocks locks;
    private final List<String> keys;
    private final String owner;
    /** The members, by key, in the order the keys were given. */
    private final Map<String, Hold> members = new LinkedHashMap<>();
    private final Duration bound;
    /** The connection a SESSION set is bound to: closed with the set. */
    private final Link session;
    private final io.redislock.LostListener onLost;
    private final List<LostListener> listeners = new CopyOnWriteArrayList<>();

    // Guarded by this.
    private boolean released;
    private String lostReason;

    MultiHold(RedisLocks locks, List<String> keys, String owner, long[] tokens, LockOptions options, long grantedAt, Link session) {
        this.locks = locks;
        this.keys = keys;
        this.owner = owner;
        this.bound = options.unavailableAfter;
        this.session = session;
        this.onLost = options.onLost;
        LockOptions member = options.withoutOnLost(); // the set reports its loss, once
        for (int i = 0; i < keys.size(); i++) {
            members.put(keys.get(i), new Hold(locks, keys.get(i), owner, tokens[i], member, grantedAt, session));
        }
        for (Hold h : members.values()) { // told at once if lost already
            h.onLost((m, reason) -> lose(m, m.key() + ": " + reason));
        }
    }

    /** The keys, in the order they were given. */
    public List<String> keys() {
        return keys;
    }

    public String owner() {
        return owner;
    }

    /** The fencing tokens (rule 5), one per key, in the order the keys were given. */
    public List<Long> tokens() {
        List<Long> t = new ArrayList<>(keys.size());
        for (Hold h : members.values()) {
            t.add(h.token());
        }
        return Collections.unmodifiableList(t);
    }

    /** The fencing token of {@code key}; {@link IllegalArgumentException} if it is not a key of the set. */
    public long token(String key) {
        return member(key).token();
    }

    /**
     * The hold of {@code key}, an ordinary one ({@link Hold#guard}, {@link Hold#extend} per key);
     * releasing the set releases it. {@link IllegalArgumentException} if it is not a key of the set.
     */
    public Hold member(String key) {
        Hold h = members.get(key);
        if (h == null) {
            throw new IllegalArgumentException("not a key of this lock set: " + key);
        }
        return h;
    }

    public synchronized boolean isLost() {
        return lostReason != null;
    }

    /** Why the set was lost ({@code key <key>: <reason of rule 8>}), if it was. */
    public synchronized Optional<String> lostReason() {
        return Optional.ofNullable(lostReason);
    }

    /** Adds a listener, called once when the set is lost (at once if it already is). */
    public void onLost(LostListener listener) {
        String reason;
        synchronized (this) {
            listeners.add(listener);
            reason = lostReason;
        }
        if (reason != null) {
            listener.lost(this, reason);
        }
    }

    /**
     * Runs {@code command} only while this set holds {@code key} ({@code LOCK.GUARD key token
     * command...} with that key's token): the command's reply, or {@link StaleTokenException} and
     * nothing run; for a set known lost or released, {@link StaleTokenException} and nothing sent.
     */
    public Object guard(String key, String... command) {
        Hold h = member(key);
        synchronized (this) { // known without the server (rule 16)
            if (lostReason != null) {
                throw new StaleTokenException("STALE the lock set was lost: " + lostReason);
            }
            if (released) {
                throw new StaleTokenException("STALE the lock set was released");
            }
        }
        return h.guard(command);
    }

    /** Renews every member now with its ttl: {@link #extend(Duration)} with the set's ttl. */
    public boolean extend() {
        return extend(members.values().iterator().next().ttl());
    }

    /**
     * Renews every member now (rule 20, {@code LOCK.EXTEND key owner ttl TOKEN token} each): true
     * only if every one was live. A member answered 0 is lost, and so the set (reported once, its
     * other members released); false with nothing sent for a set known lost or released. A member's
     * extend unavailable ends the call as {@link Hold#extend(Duration)} does (its lease counted as
     * ending no later than that extend's send + {@code ttl}); the members after it are not sent.
     */
    public boolean extend(Duration ttl) {
        LockOptions.checkTtl(ttl);
        synchronized (this) {
            if (released || lostReason != null) {
                return false;
            }
        }
        for (Hold h : members.values()) {
            if (!h.extend(ttl)) {
                return false;
            }
        }
        synchronized (this) {
            return !released && lostReason == null;
        }
    }

    /**
     * Releases every key ({@code LOCK.MRELEASE numkeys key... owner}): true only if every member
     * was still held. The renewals of every member stop first, in the same step (rule 7). A set
     * known lost, or released already: false, nothing sent (rule 16). When the server held fewer
     * of the keys than the set has, false and the set is lost.
     */
    public boolean release() {
        return locks.await(releaseAsync(), bound.plusSeconds(1));
    }

    /** {@link #release()} without blocking: the renewals stop in this call. */
    public CompletableFuture<Boolean> releaseAsync() {
        synchronized (this) {
            if (released) {
                return CompletableFuture.completedFuture(false);
            }
            released = true;
            if (lostReason != null) { // its members were released when it was lost
                closeSession();
                return CompletableFuture.completedFuture(false);
            }
            for (Hold h : members.values()) {
                h.detach();
            }
        }
        try {
            locks.commands(bound); // connected here, never on an event loop
        } catch (RuntimeException e) {
            closeSession();
            return CompletableFuture.failedFuture(e);
        }
        return locks.mreleaseAsync(keys, owner, bound).handle((n, error) -> {
            closeSession();
            if (error != null) {
                throw error instanceof CompletionException ce ? ce : new CompletionException(error);
            }
            if (n == null || n != keys.size()) {
                lose(null, Protocol.GONE_WHEN_RELEASED);
                return false;
            }
            return true;
        });
    }

    /** Releases; throws {@link LockLostException} if the set had been lost. */
    @Override
    public void close() {
        boolean was;
        synchronized (this) {
            was = released;
        }
        if (!release() && !was) {
            throw new LockLostException(lostReason().orElse("unknown"));
        }
    }

    /**
     * The set is lost (once; {@code member}: the member whose loss it is, null for a release that
     * found some gone): its members still held leave the loop and are released with one
     * {@code LOCK.MRELEASE}, best effort, off the thread that saw the loss (an event loop's).
     */
    private void lose(Hold member, String reason) {
        List<String> held = new ArrayList<>();
        boolean wasReleased;
        synchronized (this) {
            if (lostReason != null) {
                return;
            }
            lostReason = reason;
            wasReleased = released;
            for (Hold h : members.values()) {
                if (h.detach()) {
                    held.add(h.key());
                }
            }
        }
        if (!wasReleased) {
            try {
                locks.background.execute(() -> {
                    try {
                        if (!held.isEmpty()) {
                            locks.mreleaseAsync(held, owner, bound).whenComplete((n, e) -> closeSession());
                        } else {
                            closeSession();
                        }
                    } catch (RuntimeException e) {
                        closeSession(); // unreachable or closed: the leases end by themselves
                    }
                });
            } catch (RejectedExecutionException e) {
                closeSession(); // its RedisLocks is closed
            }
        }
        if (onLost != null) { // the options' listener: told the member lost (the first member after a release)
            try {
                onLost.lost(member != null ? member : members.values().iterator().next(), reason);
            } catch (RuntimeException e) {
                // a listener's failure is its own
            }
        }
        for (LostListener l : listeners) {
            try {
                l.lost(this, reason);
            } catch (RuntimeException e) {
                // a listener's failure is its own
            }
        }
    }

    private void closeSession() {
        if (session != null) {
            session.close();
        }
    }

    @Override
    public String toString() {
        return "MultiHold[" + keys + ", owner=" + owner + ", tokens=" + tokens() + "]";
    }
}
