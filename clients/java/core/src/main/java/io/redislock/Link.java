package io.redislock;

import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.RedisException;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.async.BaseRedisAsyncCommands;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.CommandOutput;
import io.lettuce.core.RedisConnectionException;
import io.lettuce.core.protocol.AsyncCommand;
import io.lettuce.core.protocol.Command;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.DemandAware;
import io.lettuce.core.protocol.RedisCommand;
import io.netty.buffer.ByteBuf;
import io.lettuce.core.protocol.ProtocolKeyword;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;

/**
 * One Lettuce connection of the library's own (standalone or cluster), never the application's: the
 * command link, the watchdog's, and one per wait. The first argument of every command is its key, so
 * a cluster connection routes it by slot.
 */
final class Link implements AutoCloseable {
    /** A LOCK.* (or any) command name. */
    record Name(String name) implements ProtocolKeyword {
        @Override
        public byte[] getBytes() {
            return name.getBytes(StandardCharsets.US_ASCII);
        }

        @Override
        public String toString() {
            return name;
        }
    }

    private final StatefulConnection<String, String> connection;
    private final BaseRedisAsyncCommands<String, String> async;
    /** Where this link's close is kept until it completes: its RedisLocks waits for it on close. */
    private Set<CompletableFuture<Void>> closings;

    private Link(StatefulConnection<String, String> connection, BaseRedisAsyncCommands<String, String> async) {
        this.connection = connection;
        this.async = async;
    }

    static Link open(RedisClient client) {
        StatefulRedisConnection<String, String> c = client.connect(StringCodec.UTF8);
        return new Link(c, c.async());
    }

    static Link open(RedisClusterClient client) {
        StatefulRedisClusterConnection<String, String> c = client.connect(StringCodec.UTF8);
        return new Link(c, c.async());
    }

    /**
     * Where {@code client} connects, for the unavailable error's message: its {@link RedisURI}
     * ({@code host:port}, a socket, or its Sentinels and master) or, for a cluster, its initial
     * URIs. Lettuce keeps them private and has no getter, so they are read from its fields by
     * type; "the Redis server" if that ever fails.
     */
    static String address(AbstractRedisClient client) {
        try {
            for (Class<?> c = client.getClass(); c != null; c = c.getSuperclass()) {
                for (Field f : c.getDeclaredFields()) {
                    if (Modifier.isStatic(f.getModifiers())) {
                        continue;
                    }
                    if (f.getType() == RedisURI.class || f.getType() == Iterable.class) {
                        f.setAccessible(true);
                        Object v = f.get(client);
                        if (v instanceof RedisURI u) {
                            return address(u);
                        }
                        if (v instanceof Iterable<?> uris) {
                            List<String> all = new ArrayList<>();
                            uris.forEach(u -> all.add(u instanceof RedisURI r ? address(r) : String.valueOf(u)));
                            return String.join(",", all);
                        }
                    }
                }
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            // no address to name
        }
        return "the Redis server";
    }

    private static String address(RedisURI u) {
        if (!u.getSentinels().isEmpty()) {
            List<String> all = new ArrayList<>();
            u.getSentinels().forEach(s -> all.add(address(s)));
            return "master " + u.getSentinelMasterId() + " of sentinels " + String.join(",", all);
        }
        return u.getSocket() != null ? u.getSocket() : u.getHost() + ":" + u.getPort();
    }

    /** {@code PING}: the server answers. */
    CompletableFuture<String> ping() {
        return async.ping().toCompletableFuture();
    }

    /** Sends {@code command key args...}. */
    <T> RedisFuture<T> call(CommandOutput<String, String, T> output, String command, String key, Object... args) {
        return async.dispatch(new Name(command), output, args(key, args));
    }

    /**
     * {@link #call} for a command that must not run twice (a release, a guarded write, a WAIT):
     * once written, it is never written again. Lettuce sends again what was in flight when a
     * connection dropped (at least once); this one fails instead, its outcome unknown (rule 14).
     */
    <T> CompletableFuture<T> callOnce(CommandOutput<String, String, T> output, String command, String key, Object... args) {
        return once(new Command<>(new Name(command), output, args(key, args)));
    }

    private <T> CompletableFuture<T> once(RedisCommand<String, String, T> command) {
        Once<T> c = new Once<>(command);
        connection.dispatch(c);
        return c;
    }

    private static CommandArgs<String, String> args(String key, Object... args) {
        CommandArgs<String, String> a = new CommandArgs<>(StringCodec.UTF8).addKey(key);
        for (Object arg : args) {
            if (arg instanceof Long || arg instanceof Integer) {
                a.add(((Number) arg).longValue());
            } else {
                a.add(String.valueOf(arg));
            }
        }
        return a;
    }

    /**
     * A command written at most once. Lettuce hands the commands in flight on a connection that
     * dropped to {@link #removeSource} before it queues them to be sent again on reconnect; a
     * written one fails there, and a failed command is never written. (Not on a cluster
     * connection, whose commands Lettuce wraps, nor when the client records command latencies:
     * then it is cancelled when its bound ends.)
     */
    private static final class Once<T> extends AsyncCommand<String, String, T> implements DemandAware.Sink {
        private volatile boolean written;

        Once(RedisCommand<String, String, T> command) {
            super(command);
        }

        @Override
        public void encode(ByteBuf buf) {
            written = true;
            super.encode(buf);
        }

        @Override
        public void removeSource() {
            if (written) {
                completeExceptionally(new RedisConnectionException(
                        "the connection dropped after " + getType() + " was sent: its reply is lost, and it is not sent again"));
            }
        }

        @Override
        public boolean hasDemand() {
            return true;
        }

        @Override
        public void setSource(DemandAware.Source source) {
            // a reply of one integer or value needs no back-pressure
        }
    }

    /**
     * Sends a command without a key ({@code WAIT n timeout}) to the node that serves {@code key}:
     * on a cluster, over the same node connection the key's commands went on (a keyless command
     * would go to whichever node Lettuce's default connection reaches).
     */
    <T> CompletableFuture<T> callOnNodeOf(String key, CommandOutput<String, String, T> output, String command, long... args) {
        CommandArgs<String, String> a = new CommandArgs<>(StringCodec.UTF8);
        for (long arg : args) {
            a.add(arg);
        }
        if (connection instanceof StatefulRedisClusterConnection<String, String> c) {
            RedisClusterNode master = c.getPartitions().getMasterBySlot(SlotHash.getSlot(key));
            if (master == null) {
                return CompletableFuture.failedFuture(new RedisException("no master serves the slot of " + key));
            }
            return c.getConnectionAsync(master.getUri().getHost(), master.getUri().getPort())
                    .thenCompose(n -> n.async().dispatch(new Name(command), output, a).toCompletableFuture());
        }
        return once(new Command<>(new Name(command), output, a));
    }

    /** Lifts the client's own command timeout for a wait of this long (rule 2). */
    void timeout(Duration d) {
        connection.setTimeout(d);
    }

    boolean isOpen() {
        return connection.isOpen();
    }

    @Override
    public void close() {
        closeAsync();
    }

    /** Closes; the future completes once the client has forgotten the connection. */
    CompletableFuture<Void> closeAsync() {
        CompletableFuture<Void> f = connection.closeAsync();
        Set<CompletableFuture<Void>> s = closings;
        if (s != null && !f.isDone()) {
            s.add(f);
            f.whenComplete((v, e) -> s.remove(f));
        }
        return f;
    }

    /** Keeps this link's close in {@code closings} until it completes. */
    Link closingIn(Set<CompletableFuture<Void>> closings) {
        this.closings = closings;
        return this;
    }
}
