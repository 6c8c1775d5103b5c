package io.redislock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.IntegerOutput;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
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
    private final Supplier<Link> connector;
    final ScheduledExecutorService scheduler;
    private final ConcurrentLinkedDeque<Link> idleWaits = new ConcurrentLinkedDeque<>();
    /** The acquisitions not yet over: close() ends them, which closes their waits' links. */
    private final Set<Acquisition> acquiring = ConcurrentHashMap.newKeySet();
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
     * the wait ends ungranted. Cancelling the future (or completing it, as {@code orTimeout} does)
     * closes the wait's connection, which takes it out of the server's queue (rule 3); a grant
     * already on its way is released. Every kind of hold; the same rules as {@link #acquire},
     * which waits on this.
     */
    public CompletableFuture<Hold> acquireAsync(String key, Duration wait, LockOptions options) {
        return new Acquisition(this, key, ownerOf(options), options, wait.toMillis()).start().result;
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
     * ({@code Long.MAX_VALUE}). Null when not granted. An interrupt ends an interruptible wait
     * (leaving the server's queue, rule 3); an uninterruptible one keeps the flag for later.
     */
    Hold take(String key, String owner, LockOptions o, long waitMs, boolean interruptible) throws InterruptedException {
        CompletableFuture<Hold> f = new Acquisition(this, key, owner, o, waitMs).start().result;
        boolean interrupted = false;
        try {
            for (;;) {
                try {
                    return f.get();
                } catch (InterruptedException e) {
                    if (interruptible) {
                        if (!f.cancel(false) && !f.isCompletedExceptionally()) {
                            f.join().releaseAsync(); // granted as the interrupt came
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

    static boolean isRetryable(RedisCommandExecutionException e) {
        String m = String.valueOf(e.getMessage());
        return m.startsWith("UNBLOCKED") || m.startsWith("TRYAGAIN") || m.startsWith("LOADING") || m.startsWith("READONLY")
                || m.startsWith("MASTERDOWN");
    }

    /** {@code LOCK.RELEASE key owner TOKEN token}: 1 if that hold was still live. */
    CompletableFuture<Long> releaseAsync(String key, String owner, long token) {
        return commands().call(new IntegerOutput<>(StringCodec.UTF8), "LOCK.RELEASE", key, owner, "TOKEN", token)
                .toCompletableFuture();
    }

    /** Registers an acquisition that close() is to end; false if closed already. */
    synchronized boolean started(Acquisition a) {
        if (closed) {
            return false;
        }
        acquiring.add(a);
        return true;
    }

    void finished(Acquisition a) {
        acquiring.remove(a);
    }

    /** A wait's link whose call is over, for the next wait. */
    void idle(Link link) {
        idleWaits.push(link);
    }

    Link waitLink() {
        if (closed) {
            throw new IllegalStateException("RedisLocks is closed");
        }
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
    <T> T await(Future<T> f) {
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

    /**
     * Closes the library's connections and stops the watchdog thread; holds are not released. An
     * acquire still waiting ends with {@link IllegalStateException}, its wait's connection closed.
     */
    @Override
    public void close() {
        synchronized (this) {
            closed = true;
        }
        for (Acquisition a : acquiring) { // a wait in flight ends, and its link is closed (rule 3)
            a.result.completeExceptionally(new IllegalStateException("RedisLocks is closed"));
        }
        scheduler.shutdownNow();
        List<CompletableFuture<Void>> closing = new ArrayList<>();
        for (Link l; (l = idleWaits.poll()) != null;) {
            closing.add(l.closeAsync());
        }
        for (Link l : new Link[] {commands, watchdog}) {
            if (l != null) {
                closing.add(l.closeAsync());
            }
        }
        // Closed before this returns: a client.shutdown() right after would close them again,
        // which Lettuce logs as a warning ("Connection is already closed"; rule 18).
        try {
            CompletableFuture.allOf(closing.toArray(CompletableFuture[]::new)).get(2, TimeUnit.SECONDS);
        } catch (ExecutionException | TimeoutException e) {
            // closing goes on in the background
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
