package io.redislock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.protocol.CommandArgs;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One process of {@link ElectionProcessesTest}: {@code candidate port key identity ttlMs} or
 * {@code observer port key}. It prints what it sees, one line each, and ends when its stdin does
 * (the test's end, or the test's JVM gone). A candidate prints {@code READY}, then {@code LEADER
 * term} when elected, {@code LOST term reason} when told it lost; while leader it appends its term
 * to {@code <key>:terms} every 100 ms by a fenced write ({@code LOCK.GUARD key term RPUSH ...}, on
 * a connection of its own, not the library's: the server decides), and prints {@code REFUSED term}
 * once the server refuses it (then stops writing). {@code RESIGN} on stdin resigns ({@code
 * RESIGNED term}). An observer prints {@code SEES identity term} or {@code SEES none} per leader told.
 */
public final class ElectionWorker {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[1]);
        String key = args[2];
        RedisClient client = RedisClient.create(RedisURI.create("127.0.0.1", port));
        RedisLocks locks = RedisLocks.create(client);
        // A cold JVM's first connect on a loaded 2-core machine may take seconds: a bound of 60 s
        // (rule 14 is UnavailableTest's; this is the election's).
        Duration bound = Duration.ofSeconds(60);
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        if (args[0].equals("observer")) {
            Election election = locks.election(key, "observer").unavailableAfter(bound);
            try (Observation o = election.observe(
                    leader -> say(leader.map(l -> "SEES " + l.identity() + " " + l.term()).orElse("SEES none")))) {
                while (stdin.readLine() != null) {
                    // until the test closes stdin
                }
            }
            System.exit(0);
        }
        String identity = args[3];
        Election election = locks.election(key, identity).ttl(Duration.ofMillis(Long.parseLong(args[4]))).unavailableAfter(bound);
        StatefulRedisConnection<String, String> writes = client.connect(StringCodec.UTF8);
        say("READY");
        Leadership leadership = election.campaign();
        long term = leadership.term();
        say("LEADER " + term);
        leadership.onLost((l, reason) -> say("LOST " + l.term() + " " + reason));
        AtomicBoolean resigned = new AtomicBoolean();
        CountDownLatch ended = new CountDownLatch(1);
        Thread input = new Thread(() -> {
            try {
                for (String line; (line = stdin.readLine()) != null;) {
                    if (line.equals("RESIGN")) {
                        resigned.set(true);
                        boolean live = leadership.resign();
                        say("RESIGNED " + term + " " + live);
                    }
                }
            } catch (Exception e) {
                e.printStackTrace();
            }
            ended.countDown();
        });
        input.setDaemon(true);
        input.start();
        // The fenced store: each write carries the term, and the server runs it only while the term is live.
        while (!resigned.get() && ended.getCount() > 0) {
            CommandArgs<String, String> a = new CommandArgs<>(StringCodec.UTF8).addKey(key).add(term).add("RPUSH")
                    .add(key + ":terms").add(term);
            try {
                writes.sync().dispatch(new Link.Name("LOCK.GUARD"), new AnyOutput(), a);
            } catch (RedisCommandExecutionException e) {
                if (String.valueOf(e.getMessage()).startsWith("STALE")) {
                    say("REFUSED " + term);
                    break;
                }
                throw e;
            }
            Thread.sleep(100);
        }
        ended.await();
        System.exit(0);
    }

    private static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
