package io.redislock;

import java.util.Optional;

/**
 * Told the leaders an {@link Election#observe observation} sees (rule 22), on its own thread: the
 * current one (or none) first, then each change, never the same leader twice in a row.
 */
@FunctionalInterface
public interface LeaderListener {
    void leader(Optional<Leader> leader);

    /**
     * The observation stopped on an error reply it does not ask again ({@code WRONGTYPE}: another
     * type under the key; a server without the module). Broken links, timeouts and the replies of
     * rule 19 are not told: the observation connects again and goes on.
     */
    default void failed(RuntimeException error) {}
}
