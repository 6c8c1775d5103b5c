package io.redislock.bench;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.concurrent.ThreadLocalRandom;
import java.util.stream.Stream;

/**
 * The benchmark's own server: LOCK_TEST_SERVER (default redis-server) with LOCK_MODULE (default
 * ../../../target/release/libredis_lock.so) on a free loopback port (never 6379), no persistence,
 * stopped by its PID.
 */
final class Server implements AutoCloseable {
    static final String BINARY = env("LOCK_TEST_SERVER", "redis-server");
    static final String MODULE = env("LOCK_MODULE", Path.of("../../../target/release/libredis_lock.so").toAbsolutePath().normalize().toString());

    final int port;
    private final Process process;
    private final Path dir;

    static String env(String name, String otherwise) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? otherwise : v;
    }

    private static int freePort() {
        for (;;) {
            int port = 20000 + ThreadLocalRandom.current().nextInt(30000);
            try (ServerSocket s = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
                return s.getLocalPort();
            } catch (IOException e) {
                // taken: another
            }
        }
    }

    Server() throws IOException, InterruptedException {
        port = freePort();
        dir = Files.createTempDirectory("redislock-java-bench-");
        process = new ProcessBuilder(BINARY, "--port", String.valueOf(port), "--bind", "127.0.0.1",
                "--dir", dir.toString(), "--save", "", "--appendonly", "no", "--loadmodule", MODULE)
                .redirectErrorStream(true).redirectOutput(dir.resolve("server.log").toFile()).start();
        long end = System.nanoTime() + 10_000_000_000L;
        while (!answers()) {
            if (System.nanoTime() > end || !process.isAlive()) {
                String log = Files.readString(dir.resolve("server.log"));
                close();
                throw new IllegalStateException(BINARY + " with " + MODULE + " did not start on " + port + ":\n" + log);
            }
            Thread.sleep(20);
        }
    }

    /** Whether the server answers PING with the module's LOCK.* loaded (a LOCK.INFO of a free key). */
    private boolean answers() {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 200);
            s.setSoTimeout(1000);
            s.getOutputStream().write("LOCK.INFO bench:probe\r\n".getBytes());
            byte[] reply = new byte[64];
            int n = s.getInputStream().read(reply);
            // A free lock's LOCK.INFO is nil: RESP2 "$-1" (or "*-1"), never an error.
            return n > 0 && reply[0] != '-';
        } catch (IOException e) {
            return false;
        }
    }

    String version() {
        try {
            Process p = new ProcessBuilder(BINARY, "--version").redirectErrorStream(true).start();
            String v = new String(p.getInputStream().readAllBytes()).trim();
            p.waitFor();
            return v;
        } catch (IOException e) {
            return BINARY;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return BINARY;
        }
    }

    /** Stops the server by its PID (never by name) and removes its directory; idempotent. */
    @Override
    public void close() {
        ProcessHandle.of(process.pid()).ifPresent(ProcessHandle::destroyForcibly);
        try {
            process.waitFor();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).forEach(f -> {
                try {
                    Files.deleteIfExists(f);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
        } catch (IOException | UncheckedIOException e) {
            // left in the temporary directory
        }
    }
}
