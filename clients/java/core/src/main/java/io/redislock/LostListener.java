package io.redislock;

/** Called once, on the watchdog's thread, when a hold is lost (rule 8). Keep it short. */
@FunctionalInterface
public interface LostListener {
    void lost(Hold hold, String reason);
}
