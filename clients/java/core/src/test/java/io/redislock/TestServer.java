package io.redislock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.protocol.CommandArgs;
import java.io.File;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.BooleanSupplier;

/**
 * A real redis-server (or valkey-server: LOCK_TEST_SERVER) with the module (LOCK_MODULE, default
 * ../../../target/debug/libredis_lock.so) on a free loopback port (never 6379), stopped by PID.
 * Public, in the core's test-jar, for the tests of the modules built on the core (spring/).
 */
public final class TestServer implements AutoCloseable {
    static final String BINARY = env("LOCK_TEST_SERVER", "redis-server");
    static final String MODULE = env("LOCK_MODULE", new File("../../../target/debug/libredis_lock.so").getAbsolutePath());

    public final int port;
    public final Process process;
    public final Path dir;
    public final RedisClient client;
    private final StatefulRedisConnection<String, String> admin;

    private static String env(String name, String otherwise) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? otherwise : v;
    }

    static int freePort() {
        for (;;) {
            int port = 20000 + ThreadLocalRandom.current().nextInt(30000);
            if (bindable(port) && bindable(port + 10000)) {
                return port;
            }
        }
    }

    private static boolean bindable(int port) {
        try (ServerSocket s = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    public TestServer(String... extra) throws IOException, InterruptedException {
        port = freePort();
        dir = Files.createTempDirectory("redislock-java-");
        List<String> cmd = new ArrayList<>(List.of(BINARY, "--port", String.valueOf(port), "--bind", "127.0.0.1",
                "--dir", dir.toString(), "--save", "", "--appendonly", "no", "--loadmodule", MODULE));
        cmd.addAll(List.of(extra));
        process = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve("server.log").toFile()).start();
        client = RedisClient.create(RedisURI.create("127.0.0.1", port));
        StatefulRedisConnection<String, String> c = null;
        long end = System.nanoTime() + 10_000_000_000L;
        while (c == null) {
            try {
                c = client.connect(StringCodec.UTF8);
            } catch (RuntimeException e) {
                if (System.nanoTime() > end || !process.isAlive()) {
                    close();
                    throw new IllegalStateException(BINARY + " with " + MODULE + " did not start on " + port + ": "
                            + Files.readString(dir.resolve("server.log")));
                }
                Thread.sleep(20);
            }
        }
        admin = c;
    }

    /** A command of the test's own, not through the library. */
    public Object cmd(Object... args) {
        CommandArgs<String, String> a = new CommandArgs<>(StringCodec.UTF8);
        for (int i = 1; i < args.length; i++) {
            a.add(String.valueOf(args[i]));
        }
        return admin.sync().dispatch(new Link.Name(String.valueOf(args[0])), new AnyOutput(), a);
    }

    /** LOCK.INFO as a map (RESP2 field/value pairs), or null when the lock is free. */
    @SuppressWarnings("unchecked")
    public Map<String, Object> info(String key) {
        Object r = cmd("LOCK.INFO", key);
        if (r == null) {
            return null;
        }
        List<Object> l = (List<Object>) r;
        Map<String, Object> m = new java.util.LinkedHashMap<>();
        for (int i = 0; i + 1 < l.size(); i += 2) {
            m.put(String.valueOf(l.get(i)), l.get(i + 1));
        }
        return m;
    }

    public long waiters(String key) {
        Map<String, Object> m = info(key);
        return m == null ? 0 : (Long) m.get("waiters");
    }

    public long calls(String command) {
        String stats = String.valueOf(cmd("INFO", "commandstats"));
        var m = java.util.regex.Pattern.compile("cmdstat_" + command.replace(".", "\\.") + ":calls=(\\d+)").matcher(stats);
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }

    public static boolean eventually(BooleanSupplier cond, long timeoutMs) throws InterruptedException {
        long end = System.nanoTime() + timeoutMs * 1_000_000L;
        while (System.nanoTime() < end) {
            try {
                if (cond.getAsBoolean()) {
                    return true;
                }
            } catch (RuntimeException e) {
                // not yet
            }
            Thread.sleep(10);
        }
        return cond.getAsBoolean();
    }

    private boolean closed;

    /** Stops the server; a second call does nothing (a test may stop it early, then leave its scope). */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        if (admin != null) {
            admin.close();
        }
        client.shutdown(java.time.Duration.ZERO, java.time.Duration.ofSeconds(1));
        // Stopped by its PID, never by name.
        ProcessHandle.of(process.pid()).ifPresent(ProcessHandle::destroyForcibly);
        try {
            process.waitFor();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
