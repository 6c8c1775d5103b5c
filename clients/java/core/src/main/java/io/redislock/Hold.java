package io.redislock;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.IntegerOutput;
import io.lettuce.core.protocol.AsyncCommand;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.LongConsumer;

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

    /** Its place in its RedisLocks' renewal loop (rule 6). */
    private final Renewals.Entry entry;
    /** The turn of its extends (rule 20): one at a time, in the order they were made (fair). */
    private final Semaphore extending = new Semaphore(1, true);

    // Guarded by this.
    private boolean released;
    private String lostReason;
    /** The lease each renewal asks for: the options' ttl, or the last {@link #extend}'s. */
    private long ttlMs;
    private long leaseEnd;
    /** When the renewal whose answer set {@link #leaseEnd} was sent: an older answer changes nothing. */
    private long leaseSentAt;
    /** The loop's renewal in flight: a release cancels it, so it is not written after the release (rule 7). */
    private AsyncCommand<String, String, Long> renewal;
    /** Why the last renewal failed, for the loss's reason (rule 15). */
    private Throwable renewalError;

    /** A renewal for the loop to send, and the connection it goes on. */
    record Renewal(Link link, AsyncCommand<String, String, Long> command) {}

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
        this.entry = locks.renewals.entry(this);
        if (session != null) { // its connection's end is the hold's (rule 6), also when Lettuce would reconnect it
            session.onDisconnected(this::sessionDropped);
        }
        synchronized (this) {
            // Into the loop: renewed every ttl/3 (its link was connected by the acquisition, on
            // the caller's thread); a fixed lease is lost at its end all the same (rule 15).
            planLoop();
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
     * token command...}); the command's reply, or {@link StaleTokenException} and nothing run. A
     * retryable reply (rule 19: {@code READONLY}, ...) is asked again until the bound, then {@link
     * LockServiceUnavailableException}; a lost reply is never sent again.
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
        try {
            // Never sent twice once its reply is lost: a guarded write is not idempotent. A retryable
            // reply (rule 19) says it did not run: asked again within the bound.
            return locks.awaitBounded(locks.askingAgain(locks::commands,
                    l -> l.callOnce(AnyOutput::new, Protocol.GUARD, key, Protocol.guard(token, command)), bound), bound);
        } catch (RedisCommandExecutionException e) {
            if (Protocol.isStale(e)) {
                throw new StaleTokenException(e.getMessage());
            }
            throw e;
        }
    }

    /**
     * Renews the lease now with this hold's ttl: {@link #extend(Duration)} with {@link #ttl()}.
     */
    public boolean extend() {
        return extend(ttl());
    }

    /**
     * Renews the lease now (rule 20: {@code LOCK.EXTEND key owner ttl TOKEN token}): it ends {@code
     * ttl} from now (longer or shorter than before), and the watchdog, if on, goes on renewing by
     * {@code ttl}. True while the hold is live; false when the server answers 0 (the hold is then
     * lost, "the lease ran out before it was renewed", reported once) and, with nothing sent, for a
     * hold known lost or released (rule 16). A retryable reply (rule 19) is asked again; unanswered,
     * or still answered so, within the bound: {@link LockServiceUnavailableException}, and the
     * watchdog goes on by the new ttl. The extend may then have run, so the client counts the lease
     * as ending no later than the extend's send + {@code ttl} (rule 15): a watchdog whose lease that
     * shortens renews at once (by the new ttl), and a fixed lease is lost then. Once written, it is
     * not sent again (a lost reply is unavailable). How a fixed lease is kept on the caller's
     * schedule. Sent on the watchdog's connection (a session hold's on its own). Extends of one
     * hold go one at a time, in the order they were made: one made while another is in flight is
     * sent once that one is answered or has failed; when that takes longer than the bound, {@link
     * LockServiceUnavailableException} with nothing sent. (A lock set's extend goes through its
     * members' turns.)
     */
    public boolean extend(Duration ttl) {
        long ms = LockOptions.ceilMillis(LockOptions.checkTtl(ttl));
        if (isDone()) { // known without the server (rule 16)
            return false;
        }
        takeTurn();
        try {
            return extendInTurn(ms);
        } finally {
            extending.release();
        }
    }

    /**
     * Waits (uninterruptibly, the interrupt flag kept) until no other extend of this hold is in
     * flight, at most the bound: its send time, which sets the deadline, then comes after that
     * one's answer, so the server ran it last whatever path the other took (a retry, a
     * reconnect, a cluster node connected first). Unavailable past the bound, nothing sent.
     */
    private void takeTurn() {
        long end = System.nanoTime() + bound.toNanos();
        boolean interrupted = false;
        try {
            for (;;) {
                try {
                    if (extending.tryAcquire(Math.max(0, end - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                        return;
                    }
                    throw locks.unavailable(new TimeoutException(
                            "the extend made before it got no answer within " + bound.toMillis() + " ms"));
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    // extend(ttl), its turn come.
    private boolean extendInTurn(long ms) {
        AsyncCommand<String, String, Long> built;
        synchronized (this) {
            if (released || lostReason != null) {
                return false;
            }
            ttlMs = ms;
            built = renewal;
        }
        landFirst(built);
        // The last attempt's send time (the call's until one is sent): a retryable reply is asked again (rule 19).
        long[] sentAt = {System.nanoTime()};
        Long reply;
        try {
            reply = locks.awaitBounded(locks.askingAgain(within -> session != null ? session : locks.watchdog(within), link -> {
                synchronized (this) {
                    if (released || lostReason != null) { // released meanwhile: nothing more is sent
                        return CompletableFuture.completedFuture(null);
                    }
                    sentAt[0] = System.nanoTime();
                    // Once written, never sent again: its lost reply is unavailable (rules 14, 19), not re-sent by Lettuce.
                    return link.callOnce(() -> new IntegerOutput<>(StringCodec.UTF8), Protocol.EXTEND, key,
                            Protocol.extend(owner, ms, token));
                }
            }, bound), bound);
        } catch (LockServiceUnavailableException e) {
            synchronized (this) {
                leaseAtMost(sentAt[0], ms);
            }
            throw e;
        }
        synchronized (this) {
            if (released || lostReason != null) {
                return false;
            }
            if (Protocol.live(reply)) {
                renewedLease(sentAt[0], ms);
                return true;
            }
        }
        lose(Protocol.RAN_OUT);
        return false;
    }

    // The loop builds a round's renewals, then pipelines them: one built with the old ttl but not
    // yet answered must reach the server before this extend, or it would set the old ttl again.
    private void landFirst(AsyncCommand<String, String, Long> built) {
        if (built == null || built.isDone()) {
            return;
        }
        built.await(bound.toMillis(), TimeUnit.MILLISECONDS); // answered, failed, or the bound passed
    }

    private synchronized boolean isDone() {
        return released || lostReason != null;
    }

    // Called with this locked: a renewal (or an extend) sent at sentAt for ttl was answered 1.
    private void renewedLease(long sentAt, long ttl) {
        if (sentAt - leaseSentAt >= 0) {
            leaseSentAt = sentAt;
            leaseEnd = sentAt + TimeUnit.MILLISECONDS.toNanos(ttl);
        }
        renewalError = null;
        planLoop();
    }

    // Called with this locked: an extend sent at sentAt for ttl got no answer. It may have run, ending
    // the server's lease before the client's deadline (rule 15): then that end is the deadline, no
    // older renewal's answer moves it, and a watchdog renews at once, by the new ttl (a renewal in
    // flight plans the next when answered).
    private void leaseAtMost(long sentAt, long ttl) {
        long end = sentAt + TimeUnit.MILLISECONDS.toNanos(ttl);
        if (end - leaseEnd >= 0 || released || lostReason != null) {
            return;
        }
        leaseEnd = end;
        if (sentAt - leaseSentAt > 0) {
            leaseSentAt = sentAt;
        }
        locks.renewals.deadline(entry, leaseEnd);
        if (watchdog && renewal == null) {
            locks.renewals.due(entry, System.nanoTime(), periodNs());
        }
    }

    // Called with this locked: the next renewal a third of the ttl after the newest lease began, and the loss at its end.
    private void planLoop() {
        if (watchdog) {
            locks.renewals.due(entry, leaseSentAt + periodNs(), periodNs());
        }
        locks.renewals.deadline(entry, leaseEnd);
    }

    /**
     * Releases the hold ({@code LOCK.RELEASE key owner TOKEN token}): true if it was still live. The
     * watchdog stops first, in the same step: no renewal is sent after this (rule 7). A retryable
     * reply (rule 19) is asked again until the bound; a lost reply is never sent again (both then
     * {@link LockServiceUnavailableException}).
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
            leaveLoop();
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
            if (!Protocol.live(reply)) {
                lose(Protocol.GONE_WHEN_RELEASED);
                return false;
            }
            return true;
        });
    }

    /**
     * A member of a lock set leaves the loop as a release does (rule 7), sending nothing: its set
     * sends one {@code LOCK.MRELEASE} for its members. Whether it was live (not released, not lost).
     */
    synchronized boolean detach() {
        if (released) {
            return false;
        }
        released = true;
        leaveLoop();
        return lostReason == null;
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

    private long periodNs() {
        return TimeUnit.MILLISECONDS.toNanos(Math.max(1, ttlMs / 3));
    }

    /** The pause before a renewal is asked again after a failure: a tenth of the lease, at most a period. */
    private long retryNs() {
        return Math.min(periodNs(), TimeUnit.MILLISECONDS.toNanos(Math.max(1, ttlMs / 10)));
    }

    // Called with this locked: out of the loop, and the renewal in flight (if any) not written after this.
    private void leaveLoop() {
        locks.renewals.remove(entry);
        if (renewal != null) {
            renewal.cancel();
            renewal = null;
        }
    }

    /** The lease's end as this client computed it (rule 15): System.nanoTime() based. */
    synchronized long leaseEnd() {
        return leaseEnd;
    }

    /** The loop: this hold's deadline passed. Lost, unless a renewal moved it meanwhile. */
    void deadlinePassed() {
        String reason;
        synchronized (this) {
            if (released || lostReason != null) {
                return;
            }
            if (System.nanoTime() - leaseEnd < 0) { // renewed meanwhile
                locks.renewals.deadline(entry, leaseEnd);
                return;
            }
            Throwable why = renewalError;
            reason = !watchdog ? Protocol.FIXED_LEASE_ENDED
                    : Protocol.unreachable(why == null ? "no reply to the renewal" : String.valueOf(why.getMessage()));
        }
        lose(reason);
    }

    /**
     * The loop: this hold's renewal, due now, on the watchdog's link (or its session's); null when
     * the hold is released or lost, or when the watchdog's link is reconnecting (asked again soon).
     */
    synchronized Renewal renewal() {
        if (released || lostReason != null) {
            return null;
        }
        Link link = session != null ? session : locks.watchdogIfOpen();
        if (link == null) { // reconnecting (after a failover): asked again soon, within the lease
            locks.reconnectWatchdog();
            locks.renewals.due(entry, System.nanoTime() + retryNs(), periodNs());
            return null;
        }
        long ttl = ttlMs;
        long fellDue = leaseSentAt + periodNs();
        long sentAt = System.nanoTime();
        AsyncCommand<String, String, Long> c = Link.command(new IntegerOutput<>(StringCodec.UTF8), Protocol.EXTEND, key,
                Protocol.extend(owner, ttl, token));
        renewal = c;
        c.whenComplete((reply, error) -> renewed(link, c, sentAt, fellDue, ttl, reply, error));
        return new Renewal(link, c);
    }

    private void renewed(Link link, AsyncCommand<String, String, Long> c, long sentAt, long fellDue, long ttl, Long reply,
            Throwable error) {
        Throwable cause = RedisLocks.causeOf(error);
        boolean retryable = cause instanceof RedisCommandExecutionException e && Protocol.isRetryable(e);
        if (retryable && session == null) {
            locks.failover(link); // a demoted master, a moved slot: the link (or the map) anew (rule 19)
        }
        String reason;
        synchronized (this) {
            if (renewal == c) {
                renewal = null;
            }
            if (released || lostReason != null) {
                return;
            }
            if (cause == null && Protocol.live(reply)) {
                LongConsumer lag = Renewals.lagObserver;
                if (lag != null) {
                    lag.accept(System.nanoTime() - fellDue);
                }
                renewedLease(sentAt, ttl);
                return;
            }
            reason = lossOf(cause, retryable);
            if (reason == null) { // a broken link: asked again until the lease ends (rule 15)
                renewalError = cause;
                locks.renewals.due(entry, System.nanoTime() + retryNs(), periodNs());
                return;
            }
        }
        lose(reason);
    }

    // Called with this locked: the loss a failed renewal means, or null for a broken link (asked again).
    private String lossOf(Throwable cause, boolean retryable) {
        if (cause == null) {
            return Protocol.RAN_OUT;
        }
        if (cause instanceof RedisCommandExecutionException && !retryable) {
            return Protocol.refused(cause.getMessage());
        }
        if (session != null && !session.isOpen()) {
            return Protocol.sessionClosed(String.valueOf(cause.getMessage()));
        }
        if (retryable || RedisLocks.isUnavailability(cause) || cause instanceof CancellationException) {
            return null;
        }
        return Protocol.watchdogFailed(String.valueOf(cause));
    }

    /** The session's connection dropped: lost, unless released (a release closes it). */
    private void sessionDropped() {
        synchronized (this) {
            if (released) {
                return;
            }
        }
        lose(Protocol.sessionClosed("the connection dropped"));
    }

    private void lose(String reason) {
        synchronized (this) {
            if (lostReason != null) {
                return;
            }
            lostReason = reason;
            leaveLoop();
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
