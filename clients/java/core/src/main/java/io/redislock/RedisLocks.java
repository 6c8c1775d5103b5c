package io.redislock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisException;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.IntegerOutput;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The entry point: locks on one Redis (or Valkey) with the redis-lock module, over a Lettuce client
 * the application owns. Every connection it makes is its own: one for commands, one for the
 * watchdog (rule 6), one per wait (rule 3). Close it to close them; the client stays open.
 *
 * <pre>{@code
 * RedisLocks locks = RedisLocks.create(RedisClient.create("redis://localhost"));
 * try (Hold hold = locks.acquire("order:42", Duration.ofSeconds(5))) {
 *     hold.guard("SET", "order:42:state", "paid");
 * }
 * }</pre>
 */
public final class RedisLocks implements AutoCloseable {
    private final Supplier<Link> connector;
    /** Where the client connects, for {@link LockServiceUnavailableException}'s message. */
    private final String address;
    final ScheduledExecutorService scheduler;
    /** The one renewal loop of every watchdog hold of this object (rule 6), on {@link #scheduler}'s thread. */
    final Renewals renewals;
    /**
     * Connects off the caller's thread, so that a server that never answers costs the caller only
     * its bound; and runs an acquisition's retries, which connect.
     */
    final ExecutorService background = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "redis-lock-connect");
        t.setDaemon(true);
        return t;
    });
    private final ConcurrentLinkedDeque<Link> idleWaits = new ConcurrentLinkedDeque<>();
    /** The acquisitions not yet over: close() ends them, which closes their waits' links. */
    private final Set<Acquisition<?>> acquiring = ConcurrentHashMap.newKeySet();
    /** The observations not yet closed: close() closes them. */
    private final Set<Observation> observations = ConcurrentHashMap.newKeySet();
    /** The closes of links still in progress (a cancelled wait's, a session's): close() waits for them. */
    private final Set<CompletableFuture<Void>> closing = ConcurrentHashMap.newKeySet();
    /** Links left after a failover, closed once what was in flight on them is answered (or by close()). */
    private final Set<Link> retiring = ConcurrentHashMap.newKeySet();
    private final SharedLink commands = new SharedLink();
    private final SharedLink watchdog = new SharedLink();
    private volatile boolean closed;

    private RedisLocks(Supplier<Link> connector, String address) {
        this.connector = () -> connector.get().closingIn(closing);
        this.address = address;
        ScheduledThreadPoolExecutor s = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "redis-lock-watchdog");
            t.setDaemon(true);
            return t;
        });
        s.setRemoveOnCancelPolicy(true);
        this.scheduler = s;
        this.renewals = new Renewals(s);
    }

    /**
     * Locks over {@code client}. The command connection starts connecting now, in the background
     * (a failure is only retried by the first call): a cold JVM's first connect (Lettuce's and
     * Netty's class loading and event loops, a second or more on a loaded machine) is then mostly
     * done before the first call starts its unavailability bound's clock (rule 14).
     */
    public static RedisLocks create(RedisClient client) {
        return new RedisLocks(() -> Link.open(client), Link.address(client)).warm();
    }

    /** {@link #create(RedisClient)} on a Redis Cluster: each key's commands go to its slot's master. */
    public static RedisLocks create(RedisClusterClient client) {
        return new RedisLocks(() -> Link.open(client), Link.address(client)).warm();
    }

    private RedisLocks warm() {
        commands.connectInBackground();
        return this;
    }

    /** A {@link java.util.concurrent.locks.Lock} on {@code key} with the default options. */
    public RedisLock lock(String key) {
        return lock(key, LockOptions.defaults());
    }

    public RedisLock lock(String key, LockOptions options) {
        return new RedisLock(this, key, options);
    }

    /** Shared (read) and exclusive (write) locks of one key. */
    public RedisReadWriteLock readWriteLock(String key) {
        return readWriteLock(key, LockOptions.defaults());
    }

    public RedisReadWriteLock readWriteLock(String key, LockOptions options) {
        return new RedisReadWriteLock(this, key, options);
    }

    /** A semaphore of {@code limit} permits. */
    public RedisSemaphore semaphore(String key, int limit) {
        return semaphore(key, limit, LockOptions.defaults());
    }

    public RedisSemaphore semaphore(String key, int limit, LockOptions options) {
        return new RedisSemaphore(this, key, limit, options);
    }

    /**
     * An election on {@code key} for the candidate {@code identity} (rules 21, 22): {@link
     * Election#campaign()} for a {@link Leadership}, {@link Election#leader()}, {@link
     * Election#observe}. Each candidate's identity must be its own (a host or pod name).
     */
    public Election election(String key, String identity) {
        return new Election(this, key, identity, Election.TTL, LockOptions.UNAVAILABLE_AFTER);
    }

    /**
     * Waits for a hold without limit, as a mutex does (interruptibly; rule 14 bounds it when the
     * server cannot be reached: {@link LockServiceUnavailableException}).
     */
    public Hold acquire(String key) throws InterruptedException {
        return acquire(key, LockOptions.defaults());
    }

    public Hold acquire(String key, LockOptions options) throws InterruptedException {
        return take(key, ownerOf(options), options, Long.MAX_VALUE, true);
    }

    /** Waits up to {@code wait} for a hold; {@link NotAcquiredException} if none was granted. */
    public Hold acquire(String key, Duration wait) throws InterruptedException {
        return acquire(key, wait, LockOptions.defaults());
    }

    public Hold acquire(String key, Duration wait, LockOptions options) throws InterruptedException {
        Hold h = take(key, ownerOf(options), options, waitMillis(wait), true);
        if (h == null) {
            throw new NotAcquiredException(key);
        }
        return h;
    }

    /**
     * The asynchronous acquire: completes with the hold, or with {@link NotAcquiredException} when
     * the wait ends ungranted. Cancelling the future (or completing it, as {@code orTimeout} does)
     * closes the wait's connection, which takes it out of the server's queue (rule 3); a grant
     * already on its way is released. Every kind of hold; the same rules as {@link #acquire},
     * which waits on this.
     */
    public CompletableFuture<Hold> acquireAsync(String key, Duration wait, LockOptions options) {
        return Acquisition.of(this, key, ownerOf(options), options, waitMillis(wait)).start().result;
    }

    /**
     * A {@link java.util.concurrent.locks.Lock} on every key of a lock set (rule 23), with the
     * default options: each {@code lock()} takes them all in one step or none.
     */
    public RedisMultiLock multiLock(String... keys) {
        return multiLock(List.of(keys), LockOptions.defaults());
    }

    public RedisMultiLock multiLock(List<String> keys, LockOptions options) {
        return new RedisMultiLock(this, setKeys(keys, options), options);
    }

    /**
     * Takes every key of {@code keys} in one step, or none (rule 23: one {@code LOCK.MACQUIRE
     * ... WAIT}, queued in every key's queue at once, so sets never deadlock whatever the order of
     * their keys), waiting without limit as a mutex does. No keys, a key twice or more than 64 keys:
     * {@link IllegalArgumentException}, nothing sent.
     */
    public MultiHold acquireAll(List<String> keys) throws InterruptedException {
        return acquireAll(keys, LockOptions.defaults());
    }

    public MultiHold acquireAll(List<String> keys, LockOptions options) throws InterruptedException {
        return take(Acquisition.ofSet(this, setKeys(keys, options), ownerOf(options), options, Long.MAX_VALUE), true);
    }

    /** Waits up to {@code wait} for every key of {@code keys}; {@link NotAcquiredException} (nothing taken) if not granted. */
    public MultiHold acquireAll(List<String> keys, Duration wait) throws InterruptedException {
        return acquireAll(keys, wait, LockOptions.defaults());
    }

    public MultiHold acquireAll(List<String> keys, Duration wait, LockOptions options) throws InterruptedException {
        List<String> k = setKeys(keys, options);
        MultiHold h = take(Acquisition.ofSet(this, k, ownerOf(options), options, waitMillis(wait)), true);
        if (h == null) {
            throw new NotAcquiredException(String.join(" ", k));
        }
        return h;
    }

    /** Every key of {@code keys} if all are free now, else null and nothing taken (the form that tries once). */
    public MultiHold tryAcquireAll(List<String> keys) {
        return tryAcquireAll(keys, LockOptions.defaults());
    }

    public MultiHold tryAcquireAll(List<String> keys, LockOptions options) {
        try {
            return take(Acquisition.ofSet(this, setKeys(keys, options), ownerOf(options), options, -1), false);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    /** {@link #acquireAsync} of a lock set: completes with the {@link MultiHold}, or {@link NotAcquiredException}. */
    public CompletableFuture<MultiHold> acquireAllAsync(List<String> keys, Duration wait, LockOptions options) {
        return Acquisition.ofSet(this, setKeys(keys, options), ownerOf(options), options, waitMillis(wait)).start().result;
    }

    /** A set's keys and options checked before anything is sent (rules 17, 23): semaphore permits are not a set's mode. */
    static List<String> setKeys(List<String> keys, LockOptions options) {
        if (options.limit > 0) {
            throw new IllegalArgumentException("a lock set takes exclusive or shared locks, not semaphore permits");
        }
        return Protocol.setKeys(keys);
    }

    /** A wait in whole ms, rounded up; a negative one is an argument error (rule 17). */
    static long waitMillis(Duration wait) {
        if (wait.isNegative()) {
            throw new IllegalArgumentException("a wait must not be negative, not " + wait + " (tryAcquire tries once)");
        }
        return wait.isZero() ? 0 : LockOptions.ceilMillis(wait);
    }

    /** A hold if the lock is free now, else null (no wait: the form that tries once). */
    public Hold tryAcquire(String key) {
        return tryAcquire(key, LockOptions.defaults());
    }

    public Hold tryAcquire(String key, LockOptions options) {
        try {
            return take(key, ownerOf(options), options, -1, false);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    static String ownerOf(LockOptions options) {
        return options.owner != null ? options.owner : UUID.randomUUID().toString();
    }

    /**
     * Takes a hold: at once ({@code waitMs < 0}), waiting up to {@code waitMs}, or without limit
     * ({@code Long.MAX_VALUE}). Null when not granted. An interrupt ends an interruptible wait
     * (leaving the server's queue, rule 3); an uninterruptible one keeps the flag for later.
     */
    Hold take(String key, String owner, LockOptions o, long waitMs, boolean interruptible) throws InterruptedException {
        return take(Acquisition.of(this, key, owner, o, waitMs), interruptible);
    }

    /** {@link #take} of a lock set. */
    MultiHold takeAll(List<String> keys, String owner, LockOptions o, long waitMs, boolean interruptible) throws InterruptedException {
        return take(Acquisition.ofSet(this, keys, owner, o, waitMs), interruptible);
    }

    private <H> H take(Acquisition<H> a, boolean interruptible) throws InterruptedException {
        CompletableFuture<H> f = a.start().result;
        boolean interrupted = false;
        try {
            for (;;) {
                try {
                    return f.get();
                } catch (InterruptedException e) {
                    if (interruptible) {
                        if (!f.cancel(false) && !f.isCompletedExceptionally()) {
                            a.release(f.join()); // granted as the interrupt came
                        }
                        throw e;
                    }
                    interrupted = true;
                } catch (ExecutionException e) {
                    if (e.getCause() instanceof NotAcquiredException) {
                        return null;
                    }
                    throw unchecked(e.getCause());
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static RuntimeException unchecked(Throwable cause) {
        return cause instanceof RuntimeException re ? re : new RedisLockException(String.valueOf(cause), cause);
    }

    /** The failure a future completed with: {@link CompletionException}'s cause. */
    static Throwable causeOf(Throwable error) {
        return error instanceof CompletionException && error.getCause() != null ? error.getCause() : error;
    }

    /**
     * Whether {@code error} says the service could not be reached or did not answer as Redis with
     * the module (rule 14): anything but the server's own error reply, and "unknown command".
     */
    static boolean isUnavailability(Throwable error) {
        if (error instanceof RedisCommandExecutionException e) {
            return Protocol.isUnknownCommand(e);
        }
        return error instanceof RedisException || error instanceof IOException || error instanceof TimeoutException;
    }

    /** The unavailable error of {@code cause} (as it is if it is one already). */
    LockServiceUnavailableException unavailable(Throwable cause) {
        return cause instanceof LockServiceUnavailableException u ? u : new LockServiceUnavailableException(address, cause);
    }

    static TimeoutException noAnswerWithin(Duration bound) {
        return new TimeoutException("no answer within " + bound.toMillis() + " ms");
    }

    /**
     * {@code LOCK.RELEASE key owner TOKEN token}: 1 if that hold was still live; {@link
     * LockServiceUnavailableException} when unanswered within {@code bound}.
     */
    CompletableFuture<Long> releaseAsync(String key, String owner, long token, Duration bound) {
        // Never sent again once written and its reply lost: a second LOCK.RELEASE would answer 0
        // (rule 14's table). A retryable reply (rule 19) says it did not run: asked again.
        return askingAgain(this::commands, l -> l.callOnce(() -> new IntegerOutput<>(StringCodec.UTF8), Protocol.RELEASE, key,
                Protocol.release(owner, token)), bound);
    }

    /**
     * {@code LOCK.MRELEASE numkeys key... owner}: how many of the keys the owner held and released;
     * asked again and bounded as {@link #releaseAsync} (rule 23).
     */
    CompletableFuture<Long> mreleaseAsync(List<String> keys, String owner, Duration bound) {
        return askingAgain(this::commands, l -> l.callOnceKeys(() -> new IntegerOutput<>(StringCodec.UTF8), Protocol.MRELEASE, keys,
                owner), bound);
    }

    /**
     * Rule 19 for a release, an extend and a guarded write, the one place it is kept for them: a
     * reply of {@link Protocol#RETRYABLE} says the server did not run the command, so it is sent
     * again, with the same owner and token, after {@link #failover} (the shared link reconnected:
     * through Sentinel, to the current master; on a cluster the map of slots reloaded; a session's
     * own link kept) and the acquire's retry pause ({@link Acquisition#RETRY_MS}), until {@code
     * bound} from the call (rule 14): then {@link LockServiceUnavailableException}, its cause the
     * last reply. {@code link} gives each attempt's link, connected within the time left (the
     * first on the caller's thread, the next ones off the event loops); a connect that fails after
     * a retryable reply is asked again too (nothing was sent). Any other failure ends the call as
     * {@link #bounded} does: a lost reply is unavailable and never sent again.
     */
    <T> CompletableFuture<T> askingAgain(Function<Duration, Link> link,
            Function<Link, CompletableFuture<T>> send, Duration bound) {
        CompletableFuture<T> out = new CompletableFuture<>();
        long end = System.nanoTime() + bound.toNanos();
        AtomicReference<Throwable> last = new AtomicReference<>(); // the last retryable reply
        AtomicReference<CompletableFuture<T>> inFlight = new AtomicReference<>();
        ScheduledFuture<?> timer;
        try {
            timer = scheduler.schedule(() -> {
                Throwable l = last.get();
                if (out.completeExceptionally(unavailable(l != null ? l : noAnswerWithin(bound)))) {
                    CompletableFuture<T> f = inFlight.get();
                    if (f != null) {
                        f.cancel(false); // not sent later, if still queued while the link reconnects
                    }
                }
            }, bound.toNanos(), TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            return CompletableFuture.failedFuture(new IllegalStateException("RedisLocks is closed"));
        }
        out.whenComplete((v, e) -> timer.cancel(false)); // answered: the timer leaves the queue
        new Object() {
            void attempt() {
                if (out.isDone()) {
                    return;
                }
                Link l;
                CompletableFuture<T> f;
                try {
                    l = link.apply(Duration.ofNanos(Math.max(1, end - System.nanoTime())));
                    f = send.apply(l);
                } catch (RuntimeException e) {
                    if (last.get() != null && !(e instanceof IllegalStateException)) { // not closed: connecting again
                        again();
                    } else {
                        out.completeExceptionally(e);
                    }
                    return;
                }
                inFlight.set(f);
                f.whenComplete((v, e) -> {
                    Throwable c = causeOf(e);
                    if (c == null) {
                        out.complete(v);
                    } else if (c instanceof RedisCommandExecutionException rce && Protocol.isRetryable(rce)) {
                        last.set(c);
                        failover(l);
                        again();
                    } else {
                        out.completeExceptionally(isUnavailability(c) ? unavailable(c) : c);
                    }
                });
            }

            void again() {
                if (end - System.nanoTime() <= TimeUnit.MILLISECONDS.toNanos(Acquisition.RETRY_MS)) {
                    return; // the bound ends before another try: its timer fails the call, with the last reply
                }
                // Rejected when closed meanwhile (its timer is gone too): ended here.
                CompletableFuture.runAsync(this::attempt,
                        CompletableFuture.delayedExecutor(Acquisition.RETRY_MS, TimeUnit.MILLISECONDS, background))
                        .exceptionally(e -> {
                            out.completeExceptionally(new IllegalStateException("RedisLocks is closed"));
                            return null;
                        });
            }
        }.attempt();
        return out;
    }

    /** {@code f}, failing as unavailable when unanswered within {@code bound} or when the link fails. */
    <T> CompletableFuture<T> bounded(CompletableFuture<T> f, Duration bound) {
        CompletableFuture<T> out = new CompletableFuture<>();
        f.whenComplete((v, e) -> {
            Throwable c = causeOf(e);
            if (c == null) {
                out.complete(v);
            } else {
                out.completeExceptionally(isUnavailability(c) ? unavailable(c) : c);
            }
        });
        ScheduledFuture<?> timer = scheduler.schedule(() -> {
            if (out.completeExceptionally(unavailable(noAnswerWithin(bound)))) {
                f.cancel(false); // not sent later, if still queued while the link reconnects
            }
        }, bound.toNanos(), TimeUnit.NANOSECONDS);
        out.whenComplete((v, e) -> timer.cancel(false)); // answered: the timer leaves the queue
        return out;
    }

    /** {@code PING} on the command link if it is connected (a wait's watch, rule 14), else null. */
    CompletableFuture<String> ping() {
        Link l = commands.ifOpen();
        return l == null ? null : l.ping();
    }

    /** Registers an acquisition that close() is to end; false if closed already. */
    synchronized boolean started(Acquisition<?> a) {
        if (closed) {
            return false;
        }
        acquiring.add(a);
        return true;
    }

    void finished(Acquisition<?> a) {
        acquiring.remove(a);
    }

    /** Registers an observation that close() is to close; false if closed already. */
    synchronized boolean observing(Observation o) {
        if (closed) {
            return false;
        }
        observations.add(o);
        return true;
    }

    void observed(Observation o) {
        observations.remove(o);
    }

    /** A wait's link whose call is over, for the next wait. */
    void idle(Link link) {
        idleWaits.push(link);
    }

    Link waitLink(Duration bound) {
        if (closed) {
            throw new IllegalStateException("RedisLocks is closed");
        }
        for (Link l; (l = idleWaits.poll()) != null;) {
            if (l.isOpen()) {
                return l;
            }
            l.close();
        }
        return connect(bound);
    }

    /** The command link, connected within {@code bound} if it is not yet. */
    Link commands(Duration bound) {
        return commands.get(bound);
    }

    Link watchdog(Duration bound) {
        return watchdog.get(bound);
    }

    /**
     * A link that the calls of every hold share (the command link, the watchdog's), connected once:
     * callers that come while it connects wait for the same connect, each within its own bound.
     */
    private final class SharedLink {
        private CompletableFuture<Link> link; // guarded by RedisLocks.this

        Link get(Duration bound) {
            CompletableFuture<Link> f;
            synchronized (RedisLocks.this) {
                if (closed) {
                    throw new IllegalStateException("RedisLocks is closed");
                }
                if (link == null || link.isCompletedExceptionally()) {
                    link = CompletableFuture.supplyAsync(connector, background);
                }
                f = link;
            }
            return connected(f, bound);
        }

        /** Starts connecting off the caller's thread, unless connected or connecting. */
        void connectInBackground() {
            synchronized (RedisLocks.this) {
                if (!closed && (link == null || link.isCompletedExceptionally())) {
                    link = CompletableFuture.supplyAsync(connector, background);
                }
            }
        }

        /** The link if it is connected now, else null. */
        Link ifOpen() {
            CompletableFuture<Link> f;
            synchronized (RedisLocks.this) {
                f = link;
            }
            return f != null && f.isDone() && !f.isCompletedExceptionally() ? f.join() : null;
        }

        /** Forgets {@code seen} so that the next {@link #get} connects anew; false if it was not the link. */
        boolean forget(Link seen) {
            synchronized (RedisLocks.this) {
                if (ifOpen() != seen) {
                    return false;
                }
                link = null;
                return true;
            }
        }

        /** Closes the link (once connected, if it is connecting). */
        CompletableFuture<Void> close() {
            CompletableFuture<Link> f;
            synchronized (RedisLocks.this) {
                f = link;
            }
            if (f == null) {
                return CompletableFuture.completedFuture(null);
            }
            return f.handle((l, e) -> l).thenCompose(l -> l == null ? CompletableFuture.completedFuture(null) : l.closeAsync());
        }
    }

    /**
     * A new link, or {@link LockServiceUnavailableException} if it is not connected within {@code
     * bound}: Lettuce's own connect waits up to its handshake timeout (a minute by default) for a
     * server that accepts and never answers. Uninterruptible; the interrupt flag is kept.
     */
    private Link connect(Duration bound) {
        CompletableFuture<Link> f = CompletableFuture.supplyAsync(connector, background);
        try {
            return connected(f, bound);
        } catch (LockServiceUnavailableException e) {
            f.thenAccept(Link::close); // connected after all: nobody uses it
            throw e;
        }
    }

    private Link connected(CompletableFuture<Link> f, Duration bound) {
        try {
            return uninterruptibly(f, bound);
        } catch (TimeoutException e) {
            throw unavailable(new TimeoutException("no answer to the connection's handshake within " + bound.toMillis() + " ms"));
        } catch (ExecutionException e) {
            throw unavailable(e.getCause());
        }
    }

    private static <T> T uninterruptibly(Future<T> f, Duration bound) throws ExecutionException, TimeoutException {
        long end = System.nanoTime() + bound.toNanos();
        boolean interrupted = false;
        try {
            for (;;) {
                try {
                    return f.get(end - System.nanoTime(), TimeUnit.NANOSECONDS);
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

    /** The watchdog's link if it is open now, else null (being reopened after a failover). */
    Link watchdogIfOpen() {
        return watchdog.ifOpen();
    }

    /** The loop found no watchdog link: one is connected off its thread, unless one is connecting. */
    void reconnectWatchdog() {
        watchdog.connectInBackground();
    }

    /**
     * A command on {@code seen} met a retryable reply (rule 19: READONLY, the master it knew became
     * a replica): when {@code seen} is the watchdog's or the command link, it is reopened off the
     * caller's thread; reconnecting asks Lettuce (and through it a Sentinel) for the current master
     * (rule 11). The old link is closed once a {@code PING} sent after what is in flight on it is
     * answered (at most a second later), so the commands sent before it get their own replies
     * (retryable ones, asked again) rather than a dropped connection. On a cluster the map of slots
     * is loaded again instead. A session's own link is kept.
     */
    void failover(Link seen) {
        if (seen.isCluster()) {
            seen.refreshTopology();
            return;
        }
        SharedLink shared;
        synchronized (this) {
            if (closed) {
                return;
            }
            shared = watchdog.forget(seen) ? watchdog : commands.forget(seen) ? commands : null;
            if (shared == null) {
                return;
            }
            retiring.add(seen);
        }
        seen.ping().orTimeout(1, TimeUnit.SECONDS).whenComplete((pong, e) -> {
            if (retiring.remove(seen)) {
                seen.close();
            }
        });
        shared.connectInBackground();
    }

    /**
     * The reply of a short command, uninterruptibly; {@link LockServiceUnavailableException} when
     * it does not come within {@code bound} (the command is then cancelled) or the link fails; the
     * server's error reply as it is.
     */
    <T> T await(CompletableFuture<T> f, Duration bound) {
        return awaitBounded(bounded(f, bound), f, bound);
    }

    /** {@link #await} of {@code out}, which completes within {@code bound} ({@link #bounded}, {@link #askingAgain}). */
    <T> T awaitBounded(CompletableFuture<T> out, Duration bound) {
        return awaitBounded(out, out, bound);
    }

    private <T> T awaitBounded(CompletableFuture<T> out, CompletableFuture<T> f, Duration bound) {
        try {
            // bounded() completes within the bound: the second backstops a timer that could not run.
            return uninterruptibly(out, bound.multipliedBy(2));
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            throw c instanceof RuntimeException re ? re : new RedisLockException(String.valueOf(c), c);
        } catch (TimeoutException e) {
            f.cancel(false);
            throw unavailable(noAnswerWithin(bound));
        }
    }

    /**
     * Closes the library's connections and stops the watchdog thread; holds are not released. An
     * acquire still waiting ends with {@link IllegalStateException}, its wait's connection closed.
     */
    @Override
    public void close() {
        synchronized (this) {
            closed = true;
        }
        for (Acquisition<?> a : acquiring) { // a wait in flight ends, and its link is closed (rule 3)
            a.result.completeExceptionally(new IllegalStateException("RedisLocks is closed"));
        }
        for (Observation o : observations) {
            o.close();
        }
        scheduler.shutdownNow();
        background.shutdown();
        List<CompletableFuture<Void>> closes = new ArrayList<>();
        for (Link l; (l = idleWaits.poll()) != null;) {
            closes.add(l.closeAsync());
        }
        for (Link l : retiring) {
            if (retiring.remove(l)) {
                closes.add(l.closeAsync());
            }
        }
        closes.add(commands.close());
        closes.add(watchdog.close());
        closes.addAll(closing);
        // Closed before this returns: a client.shutdown() right after would close them again,
        // which Lettuce logs as a warning ("Connection is already closed"; rule 18).
        try {
            CompletableFuture.allOf(closes.toArray(CompletableFuture[]::new)).get(2, TimeUnit.SECONDS);
        } catch (ExecutionException | TimeoutException e) {
            // closing goes on in the background
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
