package io.redislock;

/**
 * An election's leader (rule 22): the candidate's identity and its term, the fencing token of its
 * hold. A later leader's term is always larger, also after restarts and failovers.
 */
public record Leader(String identity, long term) {}
