package io.redislock;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.output.IntegerOutput;
import io.lettuce.core.codec.StringCodec;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * One hold of one lock: its owner, its fencing token and its watchdog. Close it (try-with-resources)
 * or {@link #release()} it; {@link #close()} throws {@link LockLostException} when the hold had been
 * lost, so the work done under it can be rolled back.
 */
public final class Hold implements AutoCloseable {
    private final RedisLocks locks;
    private final String key;
    private final String owner;
    private final long token;
    private final boolean watchdog;
    /** The unavailability bound of its commands (rule 14). */
    private final Duration bound;
    /** The connection a SESSION hold is bound to: closed with the hold. */
    private final Link session;
    private final List<LostListener> listeners = new CopyOnWriteArrayList<>();

    // Guarded by this.
    private boolean released;
    private String lostReason;
    /** The lease each renewal asks for: the options' ttl, or the last {@link #extend}'s. */
    private long ttlMs;
    private long leaseEnd;
    /** When the renewal whose answer set {@link #leaseEnd} was sent: an older answer changes nothing. */
    private long leaseSentAt;
    private ScheduledFuture<?> next;
    private ScheduledFuture<?> deadline;
    private CompletableFuture<Long> inFlight;
    /** Why the last renewal failed, for the loss's reason (rule 15). */
    private Throwable renewalError;

    Hold(RedisLocks locks, String key, String owner, long token, LockOptions options, long grantedAt, Link session) {
        this.session = session;
        this.locks = locks;
        this.key = key;
        this.owner = owner;
        this.token = token;
        this.watchdog = options.watchdog;
        this.bound = options.unavailableAfter;
        this.ttlMs = LockOptions.ceilMillis(options.ttl);
        this.leaseEnd = grantedAt + TimeUnit.MILLISECONDS.toNanos(ttlMs);
        this.leaseSentAt = grantedAt;
        if (options.onLost != null) {
            listeners.add(options.onLost);
        }
        synchronized (this) {
            if (watchdog) { // its link was connected by the acquisition, on the caller's thread
                schedule(period());
            } else { // a fixed lease is lost at its end all the same (rule 15)
                armDeadline();
            }
        }
    }

    public String key() {
        return key;
    }

    public String owner() {
        return owner;
    }

    /** The fencing token of this hold (rule 5). */
    public long token() {
        return token;
    }

    /** The lease each renewal asks for: the ttl it was taken with, or the last {@link #extend}'s. */
    public synchronized Duration ttl() {
        return Duration.ofMillis(ttlMs);
    }

    public synchronized boolean isLost() {
        return lostReason != null;
    }

    public synchronized Optional<String> lostReason() {
        return Optional.ofNullable(lostReason);
    }

    /** Adds a listener, called once when the hold is lost (at once if it already is). */
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
     * Runs {@code command} only while this hold is the live exclusive one ({@code LOCK.GUARD key
     * token command...}); the command's reply, or {@link StaleTokenException} and nothing run.
     */
    public Object guard(String... command) {
        synchronized (this) { // known without the server (rule 16): nothing is sent
            if (lostReason != null) {
                throw new StaleTokenException("STALE the hold was lost: " + lostReason);
            }
            if (released) {
                throw new StaleTokenException("STALE the hold was released");
            }
        }
        Object[] args = new Object[command.length + 1];
        args[0] = token;
        System.arraycopy(command, 0, args, 1, command.length);
        try {
            // Never sent twice: a guarded write is not idempotent.
            return locks.await(locks.commands(bound).callOnce(new AnyOutput(), "LOCK.GUARD", key, args), bound);
        } catch (RedisCommandExecutionException e) {
            if (e.getMessage() != null && e.getMessage().startsWith("STALE")) {
                throw new StaleTokenException(e.getMessage());
            }
            throw e;
        }
    }

    /**
     * Renews the lease now ({@code LOCK.EXTEND key owner ttl TOKEN token}): it ends {@code ttl} from
     * now (longer or shorter than before), and the watchdog, if on, goes on renewing by {@code ttl}.
     * True if the hold was live; false if it had ended (it is then lost, reported once: rule 8) or
     * had been released. Sent on the watchdog's connection, in order with its renewals.
     */
    public boolean extend(Duration ttl) {
        long ms = LockOptions.ceilMillis(LockOptions.checkTtl(ttl));
        synchronized (this) {
            if (released || lostReason != null) { // known without the server (rule 16)
                return false;
            }
        }
        Link link = locks.watchdog(bound);
        RedisFuture<Long> f;
        CompletableFuture<Long> pending;
        long sentAt;
        synchronized (this) {
            if (released || lostReason != null) {
                return false;
            }
            ttlMs = ms;
            sentAt = System.nanoTime();
            f = link.call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.EXTEND", key, owner, ms, "TOKEN", token);
            inFlight = pending = f.toCompletableFuture();
        }
        Long reply;
        try {
            reply = locks.await(pending, bound); // unanswered: thrown, and the watchdog goes on as before
        } finally {
            synchronized (this) {
                if (inFlight == pending) {
                    inFlight = null;
                }
            }
        }
        synchronized (this) {
            if (released || lostReason != null) {
                return false;
            }
            if (reply != null && reply == 1) {
                renewedLease(sentAt, ms);
                return true;
            }
        }
        lose("an extend answered 0: the lease had ended or the lock was force-released", false);
        return false;
    }

    // Called with this locked: a renewal sent at sentAt for ttl was answered 1.
    private void renewedLease(long sentAt, long ttl) {
        if (sentAt - leaseSentAt >= 0) {
            leaseSentAt = sentAt;
            leaseEnd = sentAt + TimeUnit.MILLISECONDS.toNanos(ttl);
        }
        if (watchdog) {
            schedule(period());
        } else {
            armDeadline();
        }
    }

    /**
     * Releases the hold ({@code LOCK.RELEASE key owner TOKEN token}): true if it was still live. The
     * watchdog stops first, in the same step: no renewal is sent after this (rule 7).
     */
    public boolean release() {
        // releaseAsync() ends within the bound; this is a backstop.
        return locks.await(releaseAsync(), bound.plusSeconds(1));
    }

    /**
     * {@link #release()} without blocking: the watchdog stops at once, in this call; the future
     * completes once the server answered, with true if the hold was still live.
     */
    public CompletableFuture<Boolean> releaseAsync() {
        boolean lost;
        synchronized (this) {
            if (released) { // a second release: false, nothing sent (rule 16)
                return CompletableFuture.completedFuture(false);
            }
            released = true;
            cancelTimers();
            lost = lostReason != null;
        }
        if (lost) { // known lost: false at once, nothing sent (rule 16)
            closeSession();
            return CompletableFuture.completedFuture(false);
        }
        try {
            locks.commands(bound); // connected here, never on an event loop
        } catch (RuntimeException e) {
            closeSession();
            return CompletableFuture.failedFuture(e);
        }
        // A renewal in flight is abandoned: its answer changes nothing now, and if it reaches the
        // server after the release its token matches no hold.
        return locks.releaseAsync(key, owner, token, bound).handle((reply, error) -> {
            closeSession();
            if (error != null) {
                throw error instanceof CompletionException ce ? ce : new CompletionException(error);
            }
            if (reply == null || reply != 1) {
                lose("the hold had already ended when it was released (its lease ran out or it was force-released)", true);
                return false;
            }
            return true;
        });
    }

    private void closeSession() {
        if (session != null) {
            session.close();
        }
    }

    /** Releases; throws {@link LockLostException} if the hold had been lost. */
    @Override
    public void close() {
        boolean was = released;
        boolean live = release();
        if (!live && !was) {
            throw new LockLostException(lostReason().orElse("unknown"));
        }
    }

    private long period() {
        return Math.max(1, ttlMs / 3);
    }

    // Called with this locked.
    private void schedule(long delayMs) {
        if (next != null) {
            next.cancel(false); // one renewal chain, also when an extend and a renewal both answer
        }
        next = locks.scheduler.schedule(this::renew, delayMs, TimeUnit.MILLISECONDS);
        armDeadline();
    }

    // Called with this locked: the timer that loses the hold at its lease's end (rule 15).
    private void armDeadline() {
        if (deadline != null) {
            deadline.cancel(false);
        }
        long left = Math.max(0, leaseEnd - System.nanoTime());
        deadline = locks.scheduler.schedule(this::checkDeadline, left, TimeUnit.NANOSECONDS);
    }

    private void cancelTimers() {
        if (next != null) {
            next.cancel(false);
        }
        if (deadline != null) {
            deadline.cancel(false);
        }
    }

    /** The lease's end as this client computed it (rule 15): System.nanoTime() based. */
    synchronized long leaseEnd() {
        return leaseEnd;
    }

    private void checkDeadline() {
        Throwable why;
        synchronized (this) {
            if (released || lostReason != null || System.nanoTime() < leaseEnd) {
                return;
            }
            why = renewalError;
        }
        lose(watchdog ? "no renewal was answered before the lease ended" + (why == null ? "" : ": " + why)
                : "the lease ended: a fixed lease, with no watchdog to renew it", false);
    }

    private void renew() {
        long sentAt = System.nanoTime();
        CompletableFuture<Long> f;
        Link link;
        long ttl;
        synchronized (this) {
            if (released || lostReason != null) {
                return;
            }
            link = locks.watchdogIfOpen();
            if (link == null) { // reopening after a failover: ask again soon, within the lease
                schedule(Math.max(1, Math.min(period(), ttlMs / 10)));
                return;
            }
            ttl = ttlMs;
            try {
                f = link.call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.EXTEND", key, owner, ttl, "TOKEN", token)
                        .toCompletableFuture();
            } catch (RuntimeException e) {
                f = CompletableFuture.failedFuture(e);
            }
            inFlight = f;
        }
        CompletableFuture<Long> sent = f;
        f.whenComplete((reply, error) -> renewed(link, sent, sentAt, ttl, reply, error));
    }

    private void renewed(Link link, CompletableFuture<Long> f, long sentAt, long ttl, Long reply, Throwable error) {
        Throwable cause = RedisLocks.causeOf(error);
        // The server's refusal loses the hold; no answer, or a failover's refusal, is asked again until the lease ends.
        boolean refused = cause instanceof RedisCommandExecutionException;
        if (refused && RedisLocks.isRetryable((RedisCommandExecutionException) cause)) {
            locks.failover(link, bound);
            refused = false;
        }
        synchronized (this) {
            if (inFlight == f) {
                inFlight = null;
            }
            if (released || lostReason != null) {
                return;
            }
            if (cause == null && reply != null && reply == 1) {
                renewedLease(sentAt, ttl);
                return;
            }
            if (cause != null && !refused && System.nanoTime() < leaseEnd) {
                renewalError = cause;
                schedule(Math.max(1, Math.min(period(), ttlMs / 10)));
                return;
            }
        }
        if (cause == null) {
            lose("a renewal answered 0: the lease had ended or the lock was force-released", false);
        } else if (refused) {
            lose("a renewal failed: " + cause.getMessage(), false);
        } else {
            lose("no renewal was answered before the lease ended: " + cause, false);
        }
    }

    private void lose(String reason, boolean alreadyReleased) {
        synchronized (this) {
            if (lostReason != null) {
                return;
            }
            lostReason = reason;
            cancelTimers();
        }
        for (LostListener l : listeners) {
            try {
                l.lost(this, reason);
            } catch (RuntimeException e) {
                // a listener's failure is its own
            }
        }
    }

    @Override
    public String toString() {
        return "Hold[" + key + ", owner=" + owner + ", token=" + token + "]";
    }
}
