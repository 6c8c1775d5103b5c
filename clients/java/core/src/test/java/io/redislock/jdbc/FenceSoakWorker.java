package io.redislock.jdbc;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.redislock.Hold;
import io.redislock.LockOptions;
import io.redislock.NotAcquiredException;
import io.redislock.RedisLocks;
import io.redislock.StaleTokenException;
import java.io.IOException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;

/**
 * One worker process of {@link JdbcFenceSoakTest}: sells from the shop's stock until it is gone,
 * each sale under the lock (acquired with a wait) in one {@link JdbcFence} transaction (read the
 * stock, stop at 0, write it less one, record the sale). Prints a line per outcome: {@code SOLD}
 * after each commit, {@code STALE} for the stale error, {@code RETRY <state>} for a deadlock or
 * lock wait the database ended (rolled back, asked again), {@code PAUSE} before it SIGSTOPs itself
 * inside its transaction after the read of its sale number {@code pauseAt} (0: never).
 *
 * <p>Arguments: redis port, JDBC URL, lock key, stock table, sales table, fence table, pauseAt, name.
 */
public final class FenceSoakWorker {
    static final long LEASE_MS = 500;

    public static void main(String[] args) {
        try {
            run(Integer.parseInt(args[0]), args[1], args[2], new Shop(args[3], args[4], args[5]),
                    Integer.parseInt(args[6]), args[7]);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    private static void run(int port, String url, String key, Shop shop, int pauseAt, String name) throws Exception {
        RedisClient client = RedisClient.create(RedisURI.create("127.0.0.1", port));
        RedisLocks locks = RedisLocks.create(client);
        // A 60 s unavailability bound: a cold JVM's first connect (loading Netty and Lettuce, stopped
        // at random by the soak) took over the default 10 s under load; rule 14 is not this test's.
        LockOptions lease = LockOptions.defaults().ttl(Duration.ofMillis(LEASE_MS)).unavailableAfter(Duration.ofSeconds(60));
        int[] sold = {0};
        try (Connection connection = DriverManager.getConnection(url)) {
            for (boolean more = true; more;) {
                Hold hold;
                try {
                    hold = locks.acquire(key, Duration.ofSeconds(30), lease);
                } catch (NotAcquiredException e) {
                    continue;
                }
                try {
                    more = JdbcFence.inTransaction(connection, hold, shop.options, c -> {
                        int qty = shop.qty(c);
                        if (qty <= 0) {
                            return false;
                        }
                        if (sold[0] + 1 == pauseAt) {
                            say("PAUSE");
                            pauseMyself(); // inside the transaction, past the lease: the test resumes it
                        }
                        shop.sell(c, qty, name);
                        return true;
                    });
                    if (more) {
                        sold[0]++;
                        say("SOLD");
                    }
                } catch (StaleTokenException e) {
                    say("STALE");
                } catch (SQLException e) {
                    if (!retryable(e, url)) {
                        throw e;
                    }
                    say("RETRY " + e.getSQLState() + " " + e.getErrorCode());
                } finally {
                    hold.release(); // false when the lease ended meanwhile: the database decided
                }
            }
        }
        say("DONE " + sold[0]);
        locks.close();
        client.shutdown();
    }

    /** A deadlock, serialization failure or lock wait the database ended: the transaction is asked again. */
    private static boolean retryable(SQLException e, String url) {
        String state = e.getSQLState() == null ? "" : e.getSQLState();
        if (url.startsWith("jdbc:sqlite:")) {
            int code = e.getErrorCode() & 0xff;
            return code == 5 || code == 6; // SQLITE_BUSY, SQLITE_LOCKED
        }
        return state.startsWith("40") || state.equals("55P03") // PostgreSQL: serialization, deadlock, lock timeout
                || e.getErrorCode() == 1213 || e.getErrorCode() == 1205; // InnoDB: deadlock, lock wait timeout
    }

    private static void pauseMyself() {
        try {
            new ProcessBuilder("kill", "-STOP", String.valueOf(ProcessHandle.current().pid())).start().waitFor();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
