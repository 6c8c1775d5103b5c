package io.redislock;

import io.lettuce.core.RedisCommandExecutionException;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The wire protocol, written once (docs/clients.md): the commands the client sends, how a reply
 * reads, the loss reasons of rule 8 word for word, and the error replies that are asked again
 * (rule 19). Everything else in the client builds its commands and reasons here.
 */
final class Protocol {
    static final String ACQUIRE = "LOCK.ACQUIRE";
    static final String RELEASE = "LOCK.RELEASE";
    static final String EXTEND = "LOCK.EXTEND";
    static final String GUARD = "LOCK.GUARD";
    /** A lock set, all keys or none (rule 23): {@code LOCK.MACQUIRE numkeys key... owner ttl [SHARED] [SESSION] [WAIT ms]}. */
    static final String MACQUIRE = "LOCK.MACQUIRE";
    /** {@code LOCK.MRELEASE numkeys key... owner}: how many of the keys the owner held and released. */
    static final String MRELEASE = "LOCK.MRELEASE";
    /** The server's default {@code lock.max-set-size}: more keys are an argument error (rule 23). */
    static final int MAX_SET_SIZE = 64;
    /** Who holds a lock, told when it changes: an election's leader (rules 21, 22). */
    static final String WATCH = "LOCK.WATCH";
    /** Redis's own {@code WAIT n timeout}, after a durable grant (rule 9). */
    static final String WAIT = "WAIT";

    /**
     * The error replies that say this server did not run the command and cannot serve the key now
     * (rule 19): asked again with the same owner; to the watchdog, a broken link.
     */
    static final List<String> RETRYABLE = List.of("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "LOADING", "MASTERDOWN",
            "UNBLOCKED");

    // The loss reasons (rule 8), word for word in every client.
    static final String RAN_OUT = "the lease ran out before it was renewed";
    static final String GONE_WHEN_RELEASED = "the hold was gone when released (its lease ran out)";
    static final String FIXED_LEASE_ENDED = "the lease ended (a fixed lease, not extended in time)";

    private Protocol() {}

    /** {@code LOCK.ACQUIRE key owner ttl [modes...] [WAIT ms]}'s arguments after the key ({@code wait < 0}: no WAIT). */
    static Object[] acquire(String owner, long ttlMs, List<Object> modes, long waitMs) {
        List<Object> a = new ArrayList<>();
        a.add(owner);
        a.add(ttlMs);
        a.addAll(modes);
        if (waitMs >= 0) {
            a.add("WAIT");
            a.add(waitMs);
        }
        return a.toArray();
    }

    /** {@code LOCK.RELEASE key owner TOKEN token}'s arguments after the key. */
    static Object[] release(String owner, long token) {
        return new Object[] {owner, "TOKEN", token};
    }

    /** {@code LOCK.EXTEND key owner ttl TOKEN token}'s arguments after the key: a renewal, or an extend. */
    static Object[] extend(String owner, long ttlMs, long token) {
        return new Object[] {owner, ttlMs, "TOKEN", token};
    }

    /** {@code LOCK.GUARD key token command...}'s arguments after the key. */
    static Object[] guard(long token, String... command) {
        Object[] args = new Object[command.length + 1];
        args[0] = token;
        System.arraycopy(command, 0, args, 1, command.length);
        return args;
    }

    /**
     * {@code LOCK.WATCH key [AFTER cursor WAIT ms]}'s arguments after the key: none for the first
     * call (answered at once), else the last reply's cursor and how long to block for a change.
     */
    static Object[] watch(String cursor, long waitMs) {
        return cursor == null ? new Object[0] : new Object[] {"AFTER", cursor, "WAIT", waitMs};
    }

    /** A {@code LOCK.WATCH} reply: the cursor to pass next, and the leader it names (or none). */
    record Watched(String cursor, Optional<Leader> leader) {}

    /**
     * A {@code LOCK.WATCH} reply (a RESP3 map or a RESP2 field/value array, both read as one flat
     * list), or null when nothing is new. The leader is the exclusive holder: its owner (the
     * candidate's identity) and token (the term); a free lock, a plain string or a shared or
     * semaphore hold under the name is no leader.
     */
    static Watched watched(Object reply) {
        if (reply == null) {
            return null;
        }
        List<?> fields = (List<?>) reply;
        String cursor = null;
        String mode = null;
        Long token = null;
        List<?> holders = List.of();
        for (int i = 0; i + 1 < fields.size(); i += 2) {
            Object v = fields.get(i + 1);
            switch (String.valueOf(fields.get(i))) {
                case "cursor" -> cursor = String.valueOf(v);
                case "mode" -> mode = String.valueOf(v);
                case "token" -> token = v == null ? null : Long.valueOf(String.valueOf(v));
                case "holders" -> holders = v == null ? List.of() : (List<?>) v;
                default -> { } // a field a newer server adds
            }
        }
        if (cursor == null) {
            throw new IllegalStateException("a LOCK.WATCH reply without a cursor: " + reply);
        }
        if (!"exclusive".equals(mode) || token == null || holders.isEmpty()) {
            return new Watched(cursor, Optional.empty());
        }
        List<?> holder = (List<?>) holders.get(0);
        String owner = null;
        for (int i = 0; i + 1 < holder.size(); i += 2) {
            if ("owner".equals(String.valueOf(holder.get(i)))) {
                owner = String.valueOf(holder.get(i + 1));
            }
        }
        return new Watched(cursor, Optional.of(new Leader(owner, token)));
    }

    /**
     * A lock set's keys, checked before anything is sent (rules 17, 23): at least one, none twice,
     * at most {@link #MAX_SET_SIZE}; an unmodifiable copy in the caller's order.
     */
    static List<String> setKeys(java.util.Collection<String> keys) {
        List<String> k = List.copyOf(keys); // null keys: NullPointerException
        if (k.isEmpty()) {
            throw new IllegalArgumentException("a lock set needs at least one key");
        }
        if (k.size() > MAX_SET_SIZE) {
            throw new IllegalArgumentException("a lock set takes at most " + MAX_SET_SIZE + " keys, not " + k.size());
        }
        java.util.Set<String> seen = new java.util.HashSet<>();
        for (String key : k) {
            if (!seen.add(key)) {
                throw new IllegalArgumentException("a key appears twice in the set: " + key);
            }
        }
        return k;
    }

    /** A {@code LOCK.MACQUIRE} reply: the tokens in the order of the keys, or null when not granted. */
    static long[] tokens(Object reply) {
        if (reply == null) {
            return null;
        }
        List<?> l = (List<?>) reply;
        long[] tokens = new long[l.size()];
        for (int i = 0; i < tokens.length; i++) {
            tokens[i] = ((Number) l.get(i)).longValue();
        }
        return tokens;
    }

    /** An acquire's reply: the fencing token, or null when not granted. */
    static Long token(Long reply) {
        return reply;
    }

    /** A release's, renewal's or extend's reply: whether the hold was live. */
    static boolean live(Long reply) {
        return reply != null && reply == 1;
    }

    /** Whether an error reply begins with one of the {@link #RETRYABLE} codes (rule 19). */
    static boolean isRetryable(RedisCommandExecutionException e) {
        String m = String.valueOf(e.getMessage());
        int space = m.indexOf(' ');
        return RETRYABLE.contains(space < 0 ? m : m.substring(0, space));
    }

    /** {@code LOCK.GUARD}'s refusal: the token is no longer the live hold's (rule 5). */
    static boolean isStale(RedisCommandExecutionException e) {
        return String.valueOf(e.getMessage()).startsWith("STALE");
    }

    /** A server without the module: it answers, but not as the lock service (rule 14). */
    static boolean isUnknownCommand(RedisCommandExecutionException e) {
        return String.valueOf(e.getMessage()).startsWith("ERR unknown command");
    }

    /** The deadline passed with no successful renewal (rule 15). */
    static String unreachable(String cause) {
        return "the server could not be reached before the lease ended: " + cause;
    }

    /** A renewal got an error reply that is not retryable. */
    static String refused(String errorReply) {
        return "renewal refused: " + errorReply;
    }

    /** Any other failure of the loop for this hold. */
    static String watchdogFailed(String cause) {
        return "the watchdog failed: " + cause;
    }

    /** A session hold's own connection broke. */
    static String sessionClosed(String cause) {
        return "the session's connection closed: " + cause;
    }
}
