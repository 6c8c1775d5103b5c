package io.redislock;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.IntegerOutput;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One acquisition, the only implementation of the acquire rules (the blocking API waits on it):
 * one {@code LOCK.ACQUIRE} in the server's queue (rule 2), asked again with the same owner after a
 * connection error or a failover's refusal (rule 4), a durable grant's {@code WAIT} (rule 9), and,
 * when {@link #result} is cancelled, the wait's connection closed so the server's queue forgets it
 * (rule 3). {@link #result} completes with the hold, with {@link NotAcquiredException} when
 * none was granted in time while the server answered, or with {@link
 * LockServiceUnavailableException} when it did not (rule 14): connection errors retried past the
 * options' bound or the caller's deadline, or a wait longer than the bound whose server stopped
 * answering the {@code PING}s sent on another link.
 *
 * <p>One key ({@code LOCK.ACQUIRE}, a {@link Hold}) or a lock set ({@code LOCK.MACQUIRE}, a {@link
 * MultiHold}, rule 23): the same rules, the same code; only the command, its reply and what a
 * grant makes ({@link Grants}) differ.
 */
final class Acquisition<H> {
    /** What a grant of this acquisition makes, and how a grant nobody wants is given back. */
    interface Grants<H> {
        H hold(long[] tokens, long grantedAt, Link session);

        CompletableFuture<Boolean> release(H hold);
    }
    /** How long past the server's own wait a reply may take before the wait counts as cut off: min(this, bound). */
    private static final long GRACE_MS = 1000;
    /** The pause between retries after a connection error (rule 4) or a retryable reply (rule 19): every call's. */
    static final long RETRY_MS = 50;
    /** A wait without limit, as the client's command timeout sees it. */
    private static final Duration FOREVER = Duration.ofDays(3650);

    final CompletableFuture<H> result = new CompletableFuture<>();
    private final RedisLocks locks;
    /** The key, or the set's keys in the caller's order (then sent as one LOCK.MACQUIRE). */
    private final List<String> keys;
    private final boolean set;
    private final Grants<H> grants;
    private final String owner;
    private final LockOptions o;
    /** -1: one attempt; {@code Long.MAX_VALUE}: without limit; else the wait in ms. */
    private final long waitMs;
    private final long asked = System.nanoTime();
    private final long end;
    /** The unavailability bound (rule 14), in ns. */
    private final long boundNs;
    /** How long past its deadline a silent server is waited for (rule 14: min(1 s, bound)). */
    private final Duration grace;
    /** Whether an attempt was sent: the first is, however short the wait (rule 17). */
    private boolean tried;
    /** The link of the call in flight when it is this acquisition's own (a wait, a session, a WAIT). */
    private Link ownLink; // guarded by this
    /** The first connection failure since the server last answered (0: none), and the last one. */
    private long firstFailure; // guarded by this
    private Throwable lastFailure; // guarded by this
    /** When the attempt in progress began: a connect that is never answered failed from then. */
    private volatile long attemptStart;
    /** When the last PING of a watched wait that was answered was sent; 0 while not watched. */
    private volatile long lastPong;

    /** An acquisition of one key's hold. */
    static Acquisition<Hold> of(RedisLocks locks, String key, String owner, LockOptions o, long waitMs) {
        return new Acquisition<>(locks, List.of(key), false, owner, o, waitMs, new Grants<>() {
            @Override
            public Hold hold(long[] tokens, long grantedAt, Link session) {
                return new Hold(locks, key, owner, tokens[0], o, grantedAt, session);
            }

            @Override
            public CompletableFuture<Boolean> release(Hold hold) {
                return hold.releaseAsync();
            }
        });
    }

    /** An acquisition of a lock set: every key of {@code keys} in one step, or none (rule 23). */
    static Acquisition<MultiHold> ofSet(RedisLocks locks, List<String> keys, String owner, LockOptions o, long waitMs) {
        return new Acquisition<>(locks, keys, true, owner, o, waitMs, new Grants<>() {
            @Override
            public MultiHold hold(long[] tokens, long grantedAt, Link session) {
                return new MultiHold(locks, keys, owner, tokens, o, grantedAt, session);
            }

            @Override
            public CompletableFuture<Boolean> release(MultiHold hold) {
                return hold.releaseAsync();
            }
        });
    }

    private Acquisition(RedisLocks locks, List<String> keys, boolean set, String owner, LockOptions o, long waitMs, Grants<H> grants) {
        this.locks = locks;
        this.keys = keys;
        this.set = set;
        this.grants = grants;
        this.owner = owner;
        this.o = o;
        // A zero wait is one attempt (WAIT 0 waits forever); one past what a command timeout (in ns)
        // can hold is a wait without limit.
        this.waitMs = waitMs == 0 ? -1 : waitMs >= FOREVER.toMillis() ? Long.MAX_VALUE : waitMs;
        this.end = this.waitMs == Long.MAX_VALUE ? Long.MAX_VALUE : asked + TimeUnit.MILLISECONDS.toNanos(Math.max(0, waitMs));
        this.boundNs = o.unavailableAfter.toNanos();
        this.grace = o.unavailableAfter.compareTo(Duration.ofMillis(GRACE_MS)) < 0 ? o.unavailableAfter : Duration.ofMillis(GRACE_MS);
        result.whenComplete((h, e) -> {
            // Cancelled, timed out (orTimeout) or completed by the caller, or its RedisLocks closed:
            // the wait ends early and leaves the server's queue (rule 3). The acquisition's own
            // failures have handed their link back before they complete.
            if (e != null) {
                closeOwnLink();
            }
            locks.finished(this);
        });
    }

    /** Gives back a grant that came as the wait ended early. */
    CompletableFuture<Boolean> release(H hold) {
        return grants.release(hold);
    }

    /** Starts on the caller's thread, which connects what the hold will need (never an event loop). */
    Acquisition<H> start() {
        if (!locks.started(this)) {
            result.completeExceptionally(new IllegalStateException("RedisLocks is closed"));
            return this;
        }
        attempt();
        return this;
    }

    private boolean forever() {
        return waitMs == Long.MAX_VALUE;
    }

    private void attempt() {
        if (result.isDone()) {
            return;
        }
        long serverWait = serverWait(); // the WAIT argument: none (-1), 0 (without limit) or the ms left
        if (serverWait < -1) {
            waitEnded();
            return;
        }
        tried = true;
        boolean own = serverWait >= 0 || o.session || o.replicas > 0;
        attemptStart = System.nanoTime();
        Duration connectWithin = connectWithin();
        Link link;
        try {
            Link commands = locks.commands(connectWithin); // what the hold needs, connected here
            if (o.watchdog) {
                locks.watchdog(connectWithin);
            }
            link = own ? locks.waitLink(connectWithin) : commands;
        } catch (IllegalStateException e) { // closed
            result.completeExceptionally(e);
            return;
        } catch (RuntimeException e) {
            retryOrFail(null, e);
            return;
        }
        if (serverWait == 0 || TimeUnit.MILLISECONDS.toNanos(serverWait) > boundNs) {
            watch();
        }
        if (own) {
            synchronized (this) {
                ownLink = link;
            }
            if (result.isDone()) { // ended early while the link connected
                closeOwnLink();
                return;
            }
            link.timeout(serverWait == 0 ? FOREVER : serverWait > 0 ? grace.plusMillis(serverWait) : o.unavailableAfter);
        }
        long sent = System.nanoTime(); // a lease granted at once starts no earlier than this
        boolean waited = serverWait >= 0;
        Object[] args = Protocol.acquire(owner, LockOptions.ceilMillis(o.ttl), o.modeArgs(), serverWait);
        CompletableFuture<long[]> reply = set
                ? link.callKeys(new AnyOutput(), Protocol.MACQUIRE, keys, args).toCompletableFuture().thenApply(Protocol::tokens)
                : link.call(new IntegerOutput<>(StringCodec.UTF8), Protocol.ACQUIRE, keys.get(0), args).toCompletableFuture()
                        .thenApply(t -> Protocol.token(t) == null ? null : new long[] {t});
        // The shared command link keeps the client's own timeout: a try's reply is awaited for the bound.
        (own ? reply : locks.bounded(reply, o.unavailableAfter)).whenComplete((tokens, error) -> {
            if (error != null) {
                retryOrFail(link, error);
            } else {
                answered();
                // A waiter's lease starts when it is granted, which its reply tells.
                replied(link, tokens, waited ? System.nanoTime() : sent);
            }
        });
    }

    /**
     * The WAIT argument of the next attempt: -1 (none: one try), 0 (without limit) or the ms left,
     * rounded up (rule 17); -2 when the caller's deadline has passed. The first attempt is always
     * sent: a wait of 1 ms or less tries once (WAIT 0 would wait without limit).
     */
    private long serverWait() {
        if (forever()) {
            return 0;
        }
        if (waitMs < 0) {
            return -1;
        }
        long leftNs = end - System.nanoTime();
        if (leftNs <= 0) {
            return tried ? -2 : -1;
        }
        return LockOptions.ceilMillis(Duration.ofNanos(leftNs));
    }

    /** How long a connect may take: the bound, or less when the caller's deadline comes first (rule 14). */
    private Duration connectWithin() {
        if (waitMs < 0 || forever()) {
            return o.unavailableAfter;
        }
        Duration left = Duration.ofNanos(Math.max(0, end - System.nanoTime())).plus(grace);
        return left.compareTo(o.unavailableAfter) < 0 ? left : o.unavailableAfter;
    }

    private void replied(Link link, long[] tokens, long grantedAt) {
        if (tokens == null) {
            done(link, null);
        } else if (o.replicas > 0) {
            awaitReplicas(link, tokens, grantedAt);
        } else {
            granted(link, tokens, grantedAt);
        }
    }

    /** A grant nobody will hold, given back: {@code LOCK.RELEASE}, or one {@code LOCK.MRELEASE} for a set. */
    private void giveBack(long[] tokens) {
        if (set) {
            locks.mreleaseAsync(keys, owner, o.unavailableAfter);
        } else {
            locks.releaseAsync(keys.get(0), owner, tokens[0], o.unavailableAfter);
        }
    }

    /**
     * A durable grant: kept only when {@code WAIT} reports its replicas; else given back and not
     * granted. A {@code WAIT} that fails or gets no answer within its timeout and the grace is
     * unavailable (rule 14); the grant is given back when the server answers.
     */
    private void awaitReplicas(Link link, long[] tokens, long grantedAt) {
        link.timeout(grace.plus(o.replicaTimeout));
        link.callOnNodeOf(keys.get(0), () -> new IntegerOutput<>(StringCodec.UTF8), Protocol.WAIT, o.replicas, ceilMillisOrZero(o.replicaTimeout))
                .whenComplete((acked, error) -> {
                    if (error == null && acked != null && acked >= o.replicas) {
                        granted(link, tokens, grantedAt);
                        return;
                    }
                    giveBack(tokens);
                    if (error == null) {
                        done(link, null);
                    } else {
                        closeOwnLink();
                        Throwable cause = RedisLocks.causeOf(error);
                        result.completeExceptionally(RedisLocks.isUnavailability(cause) ? locks.unavailable(cause) : cause);
                    }
                });
    }

    private static long ceilMillisOrZero(Duration d) {
        return d.isZero() ? 0 : LockOptions.ceilMillis(d);
    }

    private void granted(Link link, long[] tokens, long grantedAt) {
        boolean wanted;
        synchronized (this) {
            // A session's link becomes the hold's here, under the lock an early end takes to close
            // it: either the end came first (the link is closed, the grant given back) or it finds
            // no link to close and the hold is released as it would be by its holder.
            wanted = !result.isDone() && (!o.session || ownLink == link);
            if (wanted && o.session) {
                ownLink = null;
            }
        }
        if (!wanted) { // ended while the grant was on its way: give it back
            giveBack(tokens);
            done(link, null);
            return;
        }
        H hold = grants.hold(tokens, grantedAt, o.session ? link : null);
        if (!result.complete(hold)) {
            grants.release(hold);
        }
        if (!o.session) {
            done(link, hold);
        }
    }

    private void notGranted() {
        result.completeExceptionally(new NotAcquiredException(String.join(" ", keys)));
    }

    /** The caller's deadline: not granted if the server answered last, unavailable if it failed (rule 14). */
    private void waitEnded() {
        Throwable failed;
        synchronized (this) {
            failed = lastFailure;
        }
        if (failed != null) {
            result.completeExceptionally(locks.unavailable(failed));
        } else {
            notGranted();
        }
    }

    private synchronized void answered() {
        firstFailure = 0;
        lastFailure = null;
    }

    /**
     * A wait longer than the bound (rule 14): every quarter bound a {@code PING} on the command
     * link; when none sent in the last bound was answered, the wait fails as unavailable, which
     * closes its link (the wait's own reply never comes from a frozen server).
     */
    private void watch() {
        if (lastPong != 0) {
            return;
        }
        lastPong = System.nanoTime();
        schedule(this::checkPong, boundNs / 4);
    }

    private void checkPong() {
        if (result.isDone()) {
            return;
        }
        long now = System.nanoTime();
        if (now - lastPong >= boundNs) {
            long ms = TimeUnit.NANOSECONDS.toMillis(boundNs);
            result.completeExceptionally(locks.unavailable(new TimeoutException("no answer to PING within " + ms + " ms")));
            return;
        }
        CompletableFuture<String> pong = locks.ping();
        if (pong != null) {
            pong.thenRun(() -> lastPong = Math.max(lastPong, now));
        }
        schedule(this::checkPong, boundNs / 4);
    }

    private void schedule(Runnable task, long delayNs) {
        try {
            locks.scheduler.schedule(task, Math.max(1, delayNs), TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            // closed: close() has ended this acquisition
        }
    }

    /** The call is over: its own link goes back for the next wait (a session's goes with its hold). */
    private void done(Link link, H hold) {
        boolean mine;
        synchronized (this) {
            mine = ownLink == link;
            ownLink = null;
        }
        if (mine) {
            if (o.session || result.isCancelled()) {
                link.close();
            } else {
                locks.idle(link);
            }
        }
        if (hold == null) {
            notGranted();
        }
    }

    /**
     * A connection error, a command timeout (the reply did not come within the wait and its grace),
     * or a failover's refusal: the link is closed (it may still be queued on the server, rule 3) and
     * the same owner asks again while the wait lasts (rule 4). Anything else is the caller's error.
     */
    private void retryOrFail(Link link, Throwable error) {
        Throwable cause = RedisLocks.causeOf(error);
        boolean refused = cause instanceof RedisCommandExecutionException rce && !Protocol.isRetryable(rce);
        boolean mine;
        synchronized (this) {
            mine = link != null && ownLink == link;
            if (mine) {
                ownLink = null;
            }
        }
        if (mine) {
            if (refused && !o.session) {
                locks.idle(link);
            } else {
                link.close();
            }
        }
        if (result.isDone()) {
            return;
        }
        if (refused) {
            result.completeExceptionally(RedisLocks.isUnavailability(cause) ? locks.unavailable(cause) : cause);
            return;
        }
        long now = System.nanoTime();
        boolean boundLeft;
        synchronized (this) {
            if (firstFailure == 0) {
                firstFailure = attemptStart;
            }
            lastFailure = cause;
            boundLeft = now - firstFailure < boundNs;
        }
        // Retried until the bound or the caller's deadline, whichever is first; the form that
        // tries once makes one attempt.
        if (!boundLeft || waitMs < 0 || (!forever() && now >= end)) {
            result.completeExceptionally(locks.unavailable(cause));
            return;
        }
        CompletableFuture.runAsync(this::attempt, CompletableFuture.delayedExecutor(RETRY_MS, TimeUnit.MILLISECONDS, locks.background));
    }

    private void closeOwnLink() {
        Link l;
        synchronized (this) {
            l = ownLink;
            ownLink = null;
        }
        if (l != null) {
            l.close();
        }
    }
}
