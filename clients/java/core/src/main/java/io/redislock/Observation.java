package io.redislock;

import io.lettuce.core.RedisCommandExecutionException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One {@link Election#observe observation} of an election's leader (rule 22): a daemon thread
 * ({@code redis-lock-observe}) on a connection of its own, blocked in {@code LOCK.WATCH key AFTER
 * cursor WAIT ms}. Each call waits at most the unavailability bound and is answered nil when
 * nothing changed: asked again with the same cursor, so a server that stops answering is noticed
 * within the bound and its grace. A broken link, a call unanswered in time or a retryable reply
 * (rule 19) closes the connection; a new one passes the last cursor, so the server answers at
 * once if the leader there is another. {@link #close()} stops it: no call of the listener begins
 * after it returns.
 */
public final class Observation implements AutoCloseable {
    /** The first pause before connecting again, doubled up to {@link #MAX_PAUSE_MS}. */
    private static final long FIRST_PAUSE_MS = Acquisition.RETRY_MS;
    private static final long MAX_PAUSE_MS = 1000;

    private final RedisLocks locks;
    private final String key;
    private final LeaderListener listener;
    private final Duration bound;
    /** How long past its WAIT a call's reply may take before the link counts as cut off. */
    private final Duration grace;
    private final Thread thread;
    // Guarded by this.
    private boolean closed;
    private Link link;

    Observation(RedisLocks locks, String key, LeaderListener listener, Duration bound) {
        this.locks = locks;
        this.key = key;
        this.listener = listener;
        this.bound = bound;
        this.grace = bound.compareTo(Duration.ofSeconds(1)) < 0 ? bound : Duration.ofSeconds(1);
        this.thread = new Thread(this::run, "redis-lock-observe");
        thread.setDaemon(true);
    }

    Observation start() {
        if (!locks.observing(this)) {
            throw new IllegalStateException("RedisLocks is closed");
        }
        thread.start();
        return this;
    }

    public String key() {
        return key;
    }

    private void run() {
        String cursor = null; // none yet: the first call answers at once with the current leader
        Optional<Leader> told = null; // nothing told yet
        long pause = FIRST_PAUSE_MS;
        try {
            while (!isClosed()) {
                Link l;
                try {
                    l = link();
                } catch (IllegalStateException e) { // the RedisLocks closed
                    return;
                } catch (RuntimeException e) { // unreachable within the bound: asked again
                    pause = pauseThenDouble(pause);
                    continue;
                }
                Object reply;
                try {
                    long waitMs = LockOptions.ceilMillis(bound);
                    CompletableFuture<Object> f = l.callOnce(AnyOutput::new, Protocol.WATCH, key, Protocol.watch(cursor, waitMs));
                    try {
                        reply = f.get(waitMs + grace.toMillis(), TimeUnit.MILLISECONDS);
                    } finally {
                        f.cancel(false); // unanswered: not sent later on a reconnected link
                    }
                } catch (ExecutionException e) {
                    Throwable c = RedisLocks.causeOf(e.getCause());
                    if (c instanceof RedisCommandExecutionException rce && !Protocol.isRetryable(rce)) {
                        fail(rce); // WRONGTYPE, or no module: asking again would answer the same
                        return;
                    }
                    drop(l); // a broken link, or a retryable reply: connect again, with the last cursor
                    pause = pauseThenDouble(pause);
                    continue;
                } catch (TimeoutException e) { // a silent server, or a link that died without a word
                    drop(l);
                    pause = pauseThenDouble(pause);
                    continue;
                }
                pause = FIRST_PAUSE_MS;
                Protocol.Watched w;
                try {
                    w = Protocol.watched(reply);
                } catch (RuntimeException e) { // not a LOCK.WATCH reply: nothing to ask again
                    fail(new RedisLockException("an unreadable LOCK.WATCH reply: " + reply, e));
                    return;
                }
                if (w == null) { // nothing new within the wait
                    continue;
                }
                cursor = w.cursor();
                if (!w.leader().equals(told)) {
                    told = w.leader();
                    tell(told);
                }
            }
        } catch (InterruptedException e) {
            // closed
        } finally {
            synchronized (this) {
                if (link != null) {
                    link.close();
                    link = null;
                }
            }
            locks.observed(this);
        }
    }

    /** The observation's link, connected within the bound if it has none. */
    private Link link() {
        synchronized (this) {
            if (link != null && link.isOpen()) {
                return link;
            }
        }
        Link l = locks.waitLink(bound); // a connection of its own: it blocks
        l.timeout(Duration.ofMillis(LockOptions.ceilMillis(bound)).plus(grace).plus(grace)); // past this thread's own bound
        synchronized (this) {
            if (closed) {
                l.close();
                throw new IllegalStateException("closed");
            }
            if (link != null) {
                link.close();
            }
            link = l;
        }
        return l;
    }

    private synchronized void drop(Link l) {
        l.close();
        if (link == l) {
            link = null;
        }
    }

    private long pauseThenDouble(long pauseMs) throws InterruptedException {
        Thread.sleep(pauseMs);
        return Math.min(MAX_PAUSE_MS, pauseMs * 2);
    }

    private synchronized boolean isClosed() {
        return closed;
    }

    // Under the monitor close() takes: once it returns, no call begins.
    private synchronized void tell(Optional<Leader> leader) {
        if (closed) {
            return;
        }
        try {
            listener.leader(leader);
        } catch (RuntimeException e) {
            // a listener's failure is its own
        }
    }

    private synchronized void fail(RuntimeException error) {
        if (closed) {
            return;
        }
        try {
            listener.failed(error);
        } catch (RuntimeException e) {
            // a listener's failure is its own
        }
    }

    /** Stops observing: the connection is closed, the thread ends; no listener call begins after this. */
    @Override
    public void close() {
        Link l;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            l = link;
            link = null;
        }
        if (l != null) {
            l.close();
        }
        if (Thread.currentThread() != thread) {
            thread.interrupt();
            try {
                thread.join(TimeUnit.SECONDS.toMillis(2));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
