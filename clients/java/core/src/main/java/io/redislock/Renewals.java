package io.redislock;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongConsumer;
import io.lettuce.core.protocol.RedisCommand;

/**
 * The one renewal loop of a {@link RedisLocks} (rule 6): one timer on the watchdog thread for
 * every hold, whatever their number. It keeps two orders of the holds: by when each one's next
 * renewal falls due, and by its lease deadline (rule 15). At each wake it marks lost the holds
 * whose deadline passed, and sends the renewals due, with those due within a tenth of their
 * interval, in one pipeline per connection: the watchdog's (one per node on a cluster) or a
 * session hold's own. A hold is out of the due order while its renewal is in flight; the reply
 * puts it back (see {@link Hold}).
 *
 * <p>Locking: a hold may call in here while it holds its own monitor; this never calls a hold
 * while it holds its own.
 */
final class Renewals {
    /** Told each successful renewal's lag in ns (its reply's arrival minus when it fell due): the bench's hook, else null. */
    static volatile LongConsumer lagObserver;

    /** No time: not in that order. */
    static final long NONE = Long.MAX_VALUE;

    /** A hold's place in the loop. Its times change only here, under the loop's monitor, while out of the orders. */
    static final class Entry {
        final Hold hold;
        final long id;
        long dueAt = NONE;
        /** How early a renewal may go to join others: a tenth of its interval. */
        long slackNs;
        long deadlineAt = NONE;
        boolean removed;

        Entry(Hold hold, long id) {
            this.hold = hold;
            this.id = id;
        }
    }

    private final ScheduledExecutorService scheduler;
    private final AtomicLong ids = new AtomicLong();
    private final TreeSet<Entry> byDue = new TreeSet<>(Comparator.comparingLong((Entry e) -> e.dueAt).thenComparingLong(e -> e.id));
    private final TreeSet<Entry> byDeadline = new TreeSet<>(
            Comparator.comparingLong((Entry e) -> e.deadlineAt).thenComparingLong(e -> e.id));
    private ScheduledFuture<?> wake; // guarded by this
    private long wakeAt = NONE; // guarded by this

    Renewals(ScheduledExecutorService scheduler) {
        this.scheduler = scheduler;
    }

    Entry entry(Hold hold) {
        return new Entry(hold, ids.incrementAndGet());
    }

    /** The hold's next renewal falls due at {@code dueAt} ({@link #NONE}: none planned). */
    synchronized void due(Entry e, long dueAt, long intervalNs) {
        if (e.removed) {
            return;
        }
        if (e.dueAt != NONE) {
            byDue.remove(e);
        }
        e.dueAt = dueAt;
        e.slackNs = intervalNs / 10;
        if (dueAt != NONE) {
            byDue.add(e);
            wakeBy(dueAt);
        }
    }

    /** The hold is lost at {@code deadlineAt} unless a renewal moves it. */
    synchronized void deadline(Entry e, long deadlineAt) {
        if (e.removed) {
            return;
        }
        if (e.deadlineAt != NONE) {
            byDeadline.remove(e);
        }
        e.deadlineAt = deadlineAt;
        byDeadline.add(e);
        wakeBy(deadlineAt);
    }

    /** Takes the hold out of the loop (released or lost): nothing of it is planned after this. */
    synchronized void remove(Entry e) {
        e.removed = true;
        if (e.dueAt != NONE) {
            byDue.remove(e);
            e.dueAt = NONE;
        }
        if (e.deadlineAt != NONE) {
            byDeadline.remove(e);
            e.deadlineAt = NONE;
        }
    }

    /** How many holds are in the loop (for tests). */
    synchronized int size() {
        return byDeadline.size();
    }

    // Called locked: the timer fires by `at` (it may fire earlier: a wake finds nothing and sleeps again).
    private void wakeBy(long at) {
        if (at >= wakeAt) {
            return;
        }
        if (wake != null) {
            wake.cancel(false);
        }
        try {
            wake = scheduler.schedule(this::tick, Math.max(0, at - System.nanoTime()), TimeUnit.NANOSECONDS);
            wakeAt = at;
        } catch (RejectedExecutionException e) {
            wake = null; // its RedisLocks is closed: the loop has stopped
        }
    }

    private void tick() {
        List<Entry> expired = new ArrayList<>();
        List<Entry> due = new ArrayList<>();
        synchronized (this) {
            wake = null;
            wakeAt = NONE;
            long now = System.nanoTime();
            while (!byDeadline.isEmpty() && byDeadline.first().deadlineAt <= now) {
                Entry e = byDeadline.pollFirst();
                e.deadlineAt = NONE;
                expired.add(e);
            }
            if (!byDue.isEmpty() && byDue.first().dueAt <= now) { // one is due: those within their tenth join it
                while (!byDue.isEmpty() && byDue.first().dueAt - byDue.first().slackNs <= now) {
                    Entry e = byDue.pollFirst();
                    e.dueAt = NONE;
                    due.add(e);
                }
            }
            wakeBy(Math.min(byDue.isEmpty() ? NONE : byDue.first().dueAt, byDeadline.isEmpty() ? NONE : byDeadline.first().deadlineAt));
        }
        for (Entry e : expired) {
            e.hold.deadlinePassed();
        }
        send(due);
    }

    /** The renewals of {@code due}, one pipeline per connection. */
    private void send(List<Entry> due) {
        Map<Link, List<RedisCommand<String, String, ?>>> byLink = new IdentityHashMap<>();
        for (Entry e : due) {
            Hold.Renewal r = e.hold.renewal();
            if (r != null) {
                byLink.computeIfAbsent(r.link(), l -> new ArrayList<>()).add(r.command());
            }
        }
        byLink.forEach((link, commands) -> {
            try {
                link.pipeline(commands);
            } catch (RuntimeException error) {
                commands.forEach(c -> c.completeExceptionally(error));
            }
        });
    }
}
