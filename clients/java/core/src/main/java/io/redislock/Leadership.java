package io.redislock;

import java.util.Optional;

/**
 * A won {@link Election#campaign campaign} (rule 21): a session hold of the election's key, renewed
 * by its {@link RedisLocks}' watchdog on the hold's own connection. Its {@link #term()} is the
 * hold's fencing token: pass it to fenced writes ({@link #guard}, {@link #hold()} for {@code
 * JdbcFence}); a later leader's term is larger. Lost leadership (a renewal answered 0, the lease
 * run out, the session's connection broken) is told once to each {@link #onLost} listener; {@link
 * #close()} resigns, and throws {@link LeadershipLostException} if it had been lost.
 */
public final class Leadership implements AutoCloseable {
    /** Called once, on the watchdog's thread or Lettuce's, when the leadership is lost. Keep it short. */
    @FunctionalInterface
    public interface Listener {
        void lost(Leadership leadership, String reason);
    }

    private final Election election;
    private final Hold hold;
    private volatile boolean resigned;

    Leadership(Election election, Hold hold) {
        this.election = election;
        this.hold = hold;
    }

    public Election election() {
        return election;
    }

    /** The candidate's identity: the hold's owner. */
    public String identity() {
        return hold.owner();
    }

    /** The term: the hold's fencing token, larger than every earlier leader's. */
    public long term() {
        return hold.token();
    }

    /** The session hold behind it, for fenced transactions ({@code JdbcFence.inTransaction(ds, hold, body)}). */
    public Hold hold() {
        return hold;
    }

    public boolean isLost() {
        return hold.isLost();
    }

    /** Why it was lost (rule 8's reason, word for word), or empty while it lasts. */
    public Optional<String> lostReason() {
        return hold.lostReason();
    }

    /** Adds a listener, called once when the leadership is lost (at once if it already is). */
    public void onLost(Listener listener) {
        hold.onLost((h, reason) -> listener.lost(this, reason));
    }

    /**
     * Runs {@code command} only while this term is the live one ({@code LOCK.GUARD key term
     * command...}): the command's reply, or {@link StaleTokenException} and nothing run.
     */
    public Object guard(String... command) {
        return hold.guard(command);
    }

    /**
     * Gives the leadership up: the hold is released (its watchdog stopped first, its session's
     * connection closed), and the next candidate in the queue is leader at once. True if it was
     * still leader; false when lost or resigned already (nothing sent).
     */
    public boolean resign() {
        resigned = true;
        return hold.release();
    }

    /** Resigns; throws {@link LeadershipLostException} if the leadership had been lost. */
    @Override
    public void close() {
        boolean was = resigned;
        boolean live = resign();
        if (!live && !was) {
            throw new LeadershipLostException(lostReason().orElse("unknown"));
        }
    }

    @Override
    public String toString() {
        return "Leadership[" + hold.key() + ", identity=" + identity() + ", term=" + term() + "]";
    }
}
