package io.redislock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisException;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.IntegerOutput;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
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
    /** How long past the server's own wait a reply may take before the wait counts as cut off. */
    private static final long GRACE_MS = 2000;
    /** The pause between retries after a connection error (rule 4). */
    private static final long RETRY_MS = 50;

    private final Supplier<Link> connector;
    final ScheduledExecutorService scheduler;
    private final ConcurrentLinkedDeque<Link> idleWaits = new ConcurrentLinkedDeque<>();
    private volatile Link commands;
    private volatile Link watchdog;
    private volatile boolean closed;

    private RedisLocks(Supplier<Link> raw) {
        this.connector = () -> {
            // Lettuce's connect fails on an interrupted thread; a lock() that kept the flag must still connect.
            boolean interrupted = Thread.interrupted();
            try {
                return raw.get();
            } finally {
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
        };
        ScheduledThreadPoolExecutor s = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "redis-lock-watchdog");
            t.setDaemon(true);
            return t;
        });
        s.setRemoveOnCancelPolicy(true);
        this.scheduler = s;
    }

    public static RedisLocks create(RedisClient client) {
        return new RedisLocks(() -> Link.open(client));
    }

    public static RedisLocks create(RedisClusterClient client) {
        return new RedisLocks(() -> Link.open(client));
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

    /** Waits up to {@code wait} for a hold; {@link NotAcquiredException} if none was granted. */
    public Hold acquire(String key, Duration wait) throws InterruptedException {
        return acquire(key, wait, LockOptions.defaults());
    }

    public Hold acquire(String key, Duration wait, LockOptions options) throws InterruptedException {
        Hold h = take(key, ownerOf(options), options, wait.toMillis(), true);
        if (h == null) {
            throw new NotAcquiredException(key);
        }
        return h;
    }

    /**
     * The asynchronous acquire: completes with the hold, or with {@link NotAcquiredException} when
     * the wait ends ungranted. Cancelling the future closes the wait's connection, which takes it
     * out of the server's queue (rule 3); a grant already on its way is released. Exclusive, shared
     * and semaphore holds; session holds and durable grants have only the blocking API.
     */
    public CompletableFuture<Hold> acquireAsync(String key, Duration wait, LockOptions o) {
        if (o.session || o.replicas > 0) {
            throw new UnsupportedOperationException("session holds and durable grants: use acquire()");
        }
        String owner = ownerOf(o);
        long ttl = o.ttl.toMillis();
        long waitMs = wait.toMillis();
        if (o.watchdog) {
            watchdog(); // connected now, on the caller's thread, never on Lettuce's event loop
        }
        boolean waits = waitMs > 0;
        Link link = waits ? waitLink() : commands();
        if (waits) {
            link.timeout(Duration.ofMillis(waitMs + GRACE_MS));
        }
        CompletableFuture<Hold> result = new CompletableFuture<>();
        long sent = System.nanoTime();
        RedisFuture<Long> f = link.call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.ACQUIRE", key,
                acquireArgs(owner, ttl, o, waits ? waitMs : -1));
        f.whenComplete((token, error) -> {
            if (error != null) {
                if (waits) {
                    link.close();
                }
                result.completeExceptionally(error);
                return;
            }
            if (waits) {
                if (result.isCancelled()) {
                    link.close();
                } else {
                    idleWaits.push(link);
                }
            }
            if (token == null) {
                result.completeExceptionally(new NotAcquiredException(key));
                return;
            }
            if (result.isCancelled()) {
                commands().call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.RELEASE", key, owner, "TOKEN", token);
                return;
            }
            result.complete(new Hold(this, key, owner, token, o, waits ? System.nanoTime() : sent, null));
        });
        result.whenComplete((h, e) -> {
            if (result.isCancelled() && waits && !f.isDone()) {
                link.close();
            }
        });
        return result;
    }

    /** A hold if the lock is free now, else null (no wait). */
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
     * ({@code Long.MAX_VALUE}). Null when not granted.
     */
    Hold take(String key, String owner, LockOptions o, long waitMs, boolean interruptible) throws InterruptedException {
        long ttl = o.ttl.toMillis();
        if (waitMs == 0) {
            waitMs = -1; // a zero wait is one attempt (the server's WAIT 0 would wait forever)
        }
        boolean forever = waitMs == Long.MAX_VALUE;
        long end = forever ? Long.MAX_VALUE : System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Math.max(0, waitMs));
        boolean interrupted = false;
        try {
            for (;;) {
                long started = System.nanoTime();
                if (waitMs < 0) {
                    Link link = o.session ? connector.get() : commands();
                    long sent = System.nanoTime(); // the lease starts no earlier than this
                    try {
                        Long token = await(link.call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.ACQUIRE", key, acquireArgs(owner, ttl, o, -1)));
                        return granted(link, o.session, key, owner, token, o, sent);
                    } catch (RedisCommandExecutionException e) {
                        if (o.session) {
                            link.close();
                        }
                        throw e;
                    } catch (RedisException e) {
                        if (o.session) {
                            link.close();
                        }
                        if (System.nanoTime() - started > TimeUnit.SECONDS.toNanos(5)) {
                            throw e;
                        }
                        Thread.sleep(RETRY_MS);
                        continue;
                    }
                }
                long left = forever ? 0 : TimeUnit.NANOSECONDS.toMillis(end - started);
                if (!forever && left <= 0) {
                    return null;
                }
                Link link = waitLink();
                if (!forever) {
                    left = TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime());
                    if (left <= 0) {
                        idleWaits.push(link);
                        return null;
                    }
                }
                link.timeout(Duration.ofMillis(forever ? TimeUnit.DAYS.toMillis(3650) : left + GRACE_MS));
                RedisFuture<Long> f = link.call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.ACQUIRE", key, acquireArgs(owner, ttl, o, forever ? 0 : left));
                Long token;
                try {
                    for (;;) {
                        try {
                            token = forever ? f.get() : f.get(left + GRACE_MS, TimeUnit.MILLISECONDS);
                            break;
                        } catch (InterruptedException e) {
                            if (interruptible) {
                                abandon(link, f, key, owner);
                                throw e;
                            }
                            interrupted = true;
                        }
                    }
                } catch (TimeoutException e) {
                    abandon(link, f, key, owner);
                    continue;
                } catch (ExecutionException e) {
                    Throwable c = e.getCause();
                    if (c instanceof RedisCommandExecutionException rce && !isRetryable(rce)) {
                        idleWaits.push(link);
                        throw rce;
                    }
                    // A connection error (or a failover's UNBLOCKED/TRYAGAIN): the same owner asks again.
                    abandon(link, f, key, owner);
                    Thread.sleep(RETRY_MS);
                    continue;
                }
                if (token == null || !o.session) {
                    idleWaits.push(link);
                }
                // A waiter's lease starts when it is granted, which its reply tells: the reply's arrival
                // (late by the reply's transit only) starts the local clock of the watchdog.
                return granted(link, o.session, key, owner, token, o, System.nanoTime());
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static Object[] acquireArgs(String owner, long ttl, LockOptions o, long wait) {
        java.util.List<Object> a = new java.util.ArrayList<>();
        a.add(owner);
        a.add(ttl);
        a.addAll(o.modeArgs());
        if (wait >= 0) {
            a.add("WAIT");
            a.add(wait);
        }
        return a.toArray();
    }

    /**
     * The hold of a grant (null for none): a session hold keeps the link that took it; a durable
     * grant first waits for its replicas (rule 9), and without them is released and not granted.
     */
    private Hold granted(Link link, boolean session, String key, String owner, Long token, LockOptions o, long started) {
        if (token == null) {
            if (session) {
                link.close();
            }
            return null;
        }
        if (o.replicas > 0) {
            Long acked;
            try {
                acked = await(link.callNoKey(new IntegerOutput<>(StringCodec.UTF8), "WAIT", o.replicas, o.replicaTimeout.toMillis()));
            } catch (RuntimeException e) {
                acked = 0L;
            }
            if (acked == null || acked < o.replicas) {
                await(commands().call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.RELEASE", key, owner, "TOKEN", token));
                if (session) {
                    link.close();
                }
                return null;
            }
        }
        return new Hold(this, key, owner, token, o, started, session ? link : null);
    }

    static boolean isRetryable(RedisCommandExecutionException e) {
        String m = String.valueOf(e.getMessage());
        return m.startsWith("UNBLOCKED") || m.startsWith("TRYAGAIN") || m.startsWith("LOADING") || m.startsWith("READONLY")
                || m.startsWith("MASTERDOWN");
    }

    /**
     * Closes a wait's connection, which takes it out of the server's queue (rule 3); never reused. A
     * grant already on its way is released, or else ends with its lease.
     */
    private void abandon(Link link, RedisFuture<Long> f, String key, String owner) {
        link.close();
        f.thenAccept(token -> {
            if (token != null) {
                commands().call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.RELEASE", key, owner, "TOKEN", token);
            }
        });
    }

    private Link waitLink() {
        for (Link l; (l = idleWaits.poll()) != null;) {
            if (l.isOpen()) {
                return l;
            }
            l.close();
        }
        return connector.get();
    }

    Link commands() {
        Link l = commands;
        if (l == null) {
            synchronized (this) {
                if (closed) {
                    throw new IllegalStateException("RedisLocks is closed");
                }
                if ((l = commands) == null) {
                    commands = l = connector.get();
                }
            }
        }
        return l;
    }

    Link watchdog() {
        Link l = watchdog;
        if (l == null) {
            synchronized (this) {
                if (closed) {
                    throw new IllegalStateException("RedisLocks is closed");
                }
                if ((l = watchdog) == null) {
                    watchdog = l = connector.get();
                }
            }
        }
        return l;
    }

    /** The watchdog's link if it is open now, else null (being reopened after a failover). */
    Link watchdogIfOpen() {
        return watchdog;
    }

    /**
     * A renewal met a failover (READONLY: the master it knew became a replica): the watchdog's link
     * is closed and reopened off the watchdog's thread; reconnecting asks Lettuce (and through it a
     * Sentinel) for the current master (rule 11).
     */
    void failover(Link seen) {
        synchronized (this) {
            if (watchdog != seen || closed) {
                return;
            }
            watchdog = null;
        }
        seen.close();
        CompletableFuture.runAsync(() -> {
            try {
                watchdog();
            } catch (RuntimeException e) {
                // the next renewal asks again
            }
        });
    }

    /** The reply of a short command, uninterruptibly; the cause of a failure as it is. */
    <T> T await(RedisFuture<T> f) {
        boolean interrupted = false;
        try {
            for (;;) {
                try {
                    return f.get(60, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    interrupted = true;
                } catch (ExecutionException e) {
                    Throwable c = e.getCause();
                    if (c instanceof RuntimeException re) {
                        throw re;
                    }
                    throw new RedisLockException(String.valueOf(c), c);
                } catch (TimeoutException e) {
                    throw new RedisLockException("no reply within 60 s", e);
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Closes the library's connections and stops the watchdog thread; holds are not released. */
    @Override
    public void close() {
        synchronized (this) {
            closed = true;
        }
        scheduler.shutdownNow();
        for (Link l; (l = idleWaits.poll()) != null;) {
            l.close();
        }
        if (commands != null) {
            commands.close();
        }
        if (watchdog != null) {
            watchdog.close();
        }
    }
}
