package io.redislock;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP proxy of the test's own in front of a real server: it forwards both ways until {@link
 * #cutAfter} (or {@link #stallAfter}, {@link #holdReplyAfter}) names a command (by words that one
 * write of it holds all of, say its name and an argument's RESP bytes); the next connection that
 * sends it gets it forwarded to the server, which runs it, and then the connection is dropped (or
 * its replies are swallowed from then on, or passed on late) instead of the reply. Later
 * connections are forwarded as before.
 */
final class CuttingProxy implements AutoCloseable {
    private final ServerSocket listening;
    private final int target;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private volatile List<String> words;
    private volatile boolean stall;
    /** With {@link #holdReplyAfter}: how long the reply is held (ms); 0 otherwise. */
    private volatile long holdMs;

    CuttingProxy(int target) throws IOException {
        this.target = target;
        this.listening = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        daemon(this::accept);
    }

    int port() {
        return listening.getLocalPort();
    }

    /** The next connection to send a write holding every one of {@code words} is dropped once the server has run it. */
    void cutAfter(String... words) {
        stall = false;
        holdMs = 0;
        this.words = Arrays.asList(words);
    }

    /** The next connection to send a write holding every one of {@code words} gets no reply from then on, and stays open. */
    void stallAfter(String... words) {
        stall = true;
        holdMs = 0;
        this.words = Arrays.asList(words);
    }

    /**
     * The next connection to send a write holding every one of {@code words} gets it forwarded at
     * once, and its reply (with what follows it, in order) {@code ms} later.
     */
    void holdReplyAfter(long ms, String... words) {
        stall = false;
        holdMs = ms;
        this.words = Arrays.asList(words);
    }

    private static boolean holdsAll(byte[] buf, int n, List<String> words) {
        String written = new String(buf, 0, n, StandardCharsets.ISO_8859_1);
        return words.stream().allMatch(written::contains);
    }

    private void accept() {
        while (!listening.isClosed()) {
            try {
                Socket client = listening.accept();
                Socket server = new Socket(InetAddress.getLoopbackAddress(), target);
                sockets.add(client);
                sockets.add(server);
                boolean[] hit = {false};
                daemon(() -> pump(client, server, hit, true));
                daemon(() -> pump(server, client, hit, false));
            } catch (IOException e) {
                return;
            }
        }
    }

    /** Copies {@code from} to {@code to}; towards the server it looks for the words, back it acts on a hit. */
    private void pump(Socket from, Socket to, boolean[] hit, boolean toServer) {
        byte[] buf = new byte[16384];
        try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
            for (int n; (n = in.read(buf)) >= 0;) {
                List<String> w = words;
                if (toServer && w != null && holdsAll(buf, n, w)) {
                    words = null;
                    synchronized (hit) {
                        hit[0] = true;
                    }
                }
                boolean drop;
                long late = 0;
                synchronized (hit) {
                    drop = !toServer && hit[0];
                    if (drop && holdMs > 0) { // the reply, late; what follows it waits behind it
                        hit[0] = false;
                        drop = false;
                        late = holdMs;
                    }
                }
                sleep(late); // the other way is forwarded meanwhile
                if (drop && !stall) { // the server ran it: the reply is lost with the connection
                    from.close();
                    to.close();
                    return;
                }
                if (!drop) {
                    out.write(buf, 0, n);
                    out.flush();
                }
            }
        } catch (IOException e) {
            // one side closed
        } finally {
            if (!stall) {
                close(from);
                close(to);
            }
        }
    }

    private static void sleep(long ms) {
        if (ms <= 0) {
            return;
        }
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void close(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // closed already
        }
    }

    private static void daemon(Runnable r) {
        Thread t = new Thread(r, "cutting-proxy");
        t.setDaemon(true);
        t.start();
    }

    @Override
    public void close() throws IOException {
        listening.close();
        for (Socket s : sockets) {
            close(s);
        }
    }
}
