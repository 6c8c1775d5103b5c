package io.redislock;

import java.time.Duration;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * An election on one key (rules 21 and 22 of docs/clients.md): candidates, each with an identity
 * (its owner: a host or pod name, unique among the candidates), wait in the key's FIFO queue;
 * the one granted the lock is the leader until it resigns, dies or loses its lease.
 *
 * <pre>{@code
 * Election election = locks.election("leader:billing", "node-1");
 * try (Leadership leadership = election.campaign()) {      // waits in the queue
 *     leadership.onLost((l, reason) -> stopWorking());
 *     leadership.guard("SET", "billing:owner", "node-1"); // fenced by the term
 * }                                                        // resigns: the next candidate leads
 * }</pre>
 *
 * Immutable: {@link #ttl} and {@link #unavailableAfter} return a copy.
 */
public final class Election {
    /** The default lease of a leader (rule 21), renewed by the watchdog every third of it. */
    static final Duration TTL = Duration.ofSeconds(10);

    private final RedisLocks locks;
    private final String key;
    private final String identity;
    private final Duration ttl;
    private final Duration unavailableAfter;

    Election(RedisLocks locks, String key, String identity, Duration ttl, Duration unavailableAfter) {
        if (Objects.requireNonNull(identity, "identity").isEmpty()) {
            throw new IllegalArgumentException("an election's identity must not be empty");
        }
        this.locks = locks;
        this.key = Objects.requireNonNull(key, "key");
        this.identity = identity;
        this.ttl = LockOptions.checkTtl(ttl);
        this.unavailableAfter = unavailableAfter;
    }

    public String key() {
        return key;
    }

    public String identity() {
        return identity;
    }

    /**
     * The leader's lease (10 s by default): how long a frozen or cut-off leader keeps the
     * leadership (a killed one loses it at once: its session's connection closes).
     */
    public Election ttl(Duration ttl) {
        return new Election(locks, key, identity, ttl, unavailableAfter);
    }

    /** The unavailability bound of the campaign's, resignation's and {@link #leader()}'s calls (rule 14; 10 s). */
    public Election unavailableAfter(Duration bound) {
        LockOptions.defaults().unavailableAfter(bound); // checked as everywhere
        return new Election(locks, key, identity, ttl, bound);
    }

    /** The options of a campaign's acquire: {@code LOCK.ACQUIRE key identity ttl SESSION WAIT ...}, the watchdog on. */
    private LockOptions options() {
        return LockOptions.defaults().owner(identity).ttl(ttl).session().unavailableAfter(unavailableAfter);
    }

    /**
     * Waits in the key's queue, without limit, until this candidate is leader (interruptibly: an
     * interrupt leaves the queue, rule 3). {@link LockServiceUnavailableException} when the
     * server cannot be reached within the bound (rule 14).
     */
    public Leadership campaign() throws InterruptedException {
        return new Leadership(this, locks.take(key, identity, options(), Long.MAX_VALUE, true));
    }

    /** {@link #campaign()} for at most {@code wait}; {@link NotAcquiredException} when another leads all along. */
    public Leadership campaign(Duration wait) throws InterruptedException {
        Hold hold = locks.take(key, identity, options(), RedisLocks.waitMillis(wait), true);
        if (hold == null) {
            throw new NotAcquiredException(key);
        }
        return new Leadership(this, hold);
    }

    /** {@link #campaign()} without blocking; cancelling the future leaves the queue (rule 3). */
    public CompletableFuture<Leadership> campaignAsync() {
        return leadershipOf(Acquisition.of(locks, key, identity, options(), Long.MAX_VALUE).start().result);
    }

    /** {@link #campaign(Duration)} without blocking: {@link NotAcquiredException} when not leader in time. */
    public CompletableFuture<Leadership> campaignAsync(Duration wait) {
        return leadershipOf(locks.acquireAsync(key, wait, options()));
    }

    private CompletableFuture<Leadership> leadershipOf(CompletableFuture<Hold> acquire) {
        CompletableFuture<Leadership> out = new CompletableFuture<>();
        acquire.whenComplete((hold, error) -> {
            if (error != null) {
                out.completeExceptionally(RedisLocks.causeOf(error));
            } else if (!out.complete(new Leadership(this, hold))) {
                hold.releaseAsync(); // cancelled as it was granted
            }
        });
        out.whenComplete((l, error) -> {
            if (error != null) {
                acquire.cancel(false); // the wait's connection closed: out of the queue
            }
        });
        return out;
    }

    /** The current leader, or empty (one {@code LOCK.WATCH key}). */
    public Optional<Leader> leader() {
        Object reply = locks.awaitBounded(locks.askingAgain(locks::commands,
                l -> l.call(new AnyOutput(), Protocol.WATCH, key).toCompletableFuture(), unavailableAfter), unavailableAfter);
        return Protocol.watched(reply).leader();
    }

    /**
     * Tells {@code listener} the current leader (or none), then each change, on a thread of its
     * own blocked in {@code LOCK.WATCH key AFTER cursor WAIT} on a connection of its own, until
     * the returned observation is closed (or the {@link RedisLocks}). After a broken link, a
     * silent server or a retryable reply it connects again and passes its last cursor: the next
     * leader it tells is the server's latest.
     */
    public Observation observe(LeaderListener listener) {
        return new Observation(locks, key, Objects.requireNonNull(listener, "listener"), unavailableAfter).start();
    }

    @Override
    public String toString() {
        return "Election[" + key + ", identity=" + identity + "]";
    }
}
