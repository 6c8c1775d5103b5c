package io.redislock;

import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.RedisChannelHandler;
import io.lettuce.core.RedisConnectionStateListener;
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
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisConnectionException;
import io.lettuce.core.output.StatusOutput;
import io.lettuce.core.protocol.CommandType;
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
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;

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
    /** The same connection when it is a cluster's (null otherwise): its node connections, one per master. */
    private final StatefulRedisClusterConnection<String, String> cluster;
    /** Reloads the cluster's map of slots after a MOVED (nothing on a standalone link). */
    private final Runnable refresh;
    /** Where this link's close is kept until it completes: its RedisLocks waits for it on close. */
    private Set<CompletableFuture<Void>> closings;

    private Link(StatefulConnection<String, String> connection, BaseRedisAsyncCommands<String, String> async,
            StatefulRedisClusterConnection<String, String> cluster, Runnable refreshTopology) {
        this.connection = connection;
        this.async = async;
        this.cluster = cluster;
        this.refresh = refreshTopology;
    }

    static Link open(RedisClient client) {
        StatefulRedisConnection<String, String> c = client.connect(StringCodec.UTF8);
        return new Link(c, c.async(), null, () -> {});
    }

    static Link open(RedisClusterClient client) {
        StatefulRedisClusterConnection<String, String> c = client.connect(StringCodec.UTF8);
        return new Link(c, c.async(), c, client::refreshPartitionsAsync);
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

    /** Sends {@code command numkeys key... args...} (a lock set's: rule 23); routed by its first key. */
    <T> RedisFuture<T> callKeys(CommandOutput<String, String, T> output, String command, List<String> keys, Object... args) {
        return async.dispatch(new Name(command), output, args(keys, args));
    }

    /** {@link #callOnce} of {@code command numkeys key... args...}: a set's keys share one slot (CROSSSLOT otherwise). */
    <T> CompletableFuture<T> callOnceKeys(Supplier<CommandOutput<String, String, T>> output, String command, List<String> keys,
            Object... args) {
        Supplier<RedisCommand<String, String, T>> make = () -> new Command<>(new Name(command), output.get(), args(keys, args));
        return cluster == null ? once(connection, make.get()) : onceOnNode(SlotHash.getSlot(keys.get(0)), make, null, false, REDIRECTS);
    }

    /** {@code command key args...} as a command of its own, for {@link #pipeline}. */
    static <T> AsyncCommand<String, String, T> command(CommandOutput<String, String, T> output, String command, String key,
            Object... args) {
        return new AsyncCommand<>(new Command<>(new Name(command), output, args(key, args)));
    }

    /**
     * Sends {@code commands} together, in one write per server (rule 6: renewals that fall due
     * together go in one pipeline). On a cluster, each goes to the master of its key's slot, on
     * this link's connection to that node; one whose slot has no master fails.
     */
    void pipeline(List<? extends RedisCommand<String, String, ?>> commands) {
        if (cluster == null) {
            connection.dispatch(commands);
            return;
        }
        Map<String, List<RedisCommand<String, String, ?>>> byNode = new HashMap<>();
        for (RedisCommand<String, String, ?> c : commands) {
            RedisClusterNode master = cluster.getPartitions().getMasterBySlot(SlotHash.getSlot(c.getArgs().getFirstEncodedKey()));
            if (master == null) {
                c.completeExceptionally(new RedisException("no master serves the slot of the key"));
            } else {
                byNode.computeIfAbsent(master.getNodeId(), id -> new ArrayList<>()).add(c);
            }
        }
        byNode.forEach((id, group) -> cluster.getConnectionAsync(id).whenComplete((node, error) -> {
            if (error != null) {
                group.forEach(c -> c.completeExceptionally(error));
            } else {
                // Released meanwhile (a first connect to the node): cancelled, not sent (rule 7).
                node.dispatch(group.stream().filter(c -> !c.isDone()).toList());
            }
        }));
    }

    /**
     * {@link #call} for a command that must not run twice (a release, a guarded write): once
     * written, it is never written again. Lettuce sends again what was in flight when a
     * connection dropped (at least once); this one fails instead, its outcome unknown (rule 14).
     * On a cluster it goes on the connection to the key's master, following a {@code MOVED} or
     * {@code ASK} (which say it did not run: rule 19). The other retryable replies are asked
     * again by the caller ({@link RedisLocks#askingAgain}), as a new command.
     */
    <T> CompletableFuture<T> callOnce(Supplier<CommandOutput<String, String, T>> output, String command, String key, Object... args) {
        Supplier<RedisCommand<String, String, T>> make = () -> new Command<>(new Name(command), output.get(), args(key, args));
        return cluster == null ? once(connection, make.get()) : onceOnNode(SlotHash.getSlot(key), make, null, false, REDIRECTS);
    }

    /**
     * Sends a command without a key ({@code WAIT n timeout}) once, to the node that serves {@code
     * key}: on a cluster, over the same node connection the key's commands went on (a keyless
     * command would go to whichever node Lettuce's default connection reaches).
     */
    <T> CompletableFuture<T> callOnNodeOf(String key, Supplier<CommandOutput<String, String, T>> output, String command, long... args) {
        Supplier<RedisCommand<String, String, T>> make = () -> {
            CommandArgs<String, String> a = new CommandArgs<>(StringCodec.UTF8);
            for (long arg : args) {
                a.add(arg);
            }
            return new Command<>(new Name(command), output.get(), a);
        };
        return cluster == null ? once(connection, make.get()) : onceOnNode(SlotHash.getSlot(key), make, null, false, REDIRECTS);
    }

    /** How many {@code MOVED}/{@code ASK} redirects a command sent once follows. */
    private static final int REDIRECTS = 5;

    private static <T> Once<T> once(StatefulConnection<String, String> on, RedisCommand<String, String, T> command) {
        Once<T> c = new Once<>(command);
        on.dispatch(c);
        return c;
    }

    /**
     * A command sent once on a cluster: on the connection to the slot's master, or to {@code
     * target} ("host:port" of a MOVED, or of an ASK: then preceded by ASKING). Each redirect
     * says the command did not run there, so it goes again (a MOVED also reloads the map).
     */
    private <T> CompletableFuture<T> onceOnNode(int slot, Supplier<RedisCommand<String, String, T>> make, String target,
            boolean asking, int redirects) {
        CompletableFuture<StatefulRedisConnection<String, String>> node;
        if (target != null) {
            int colon = target.lastIndexOf(':');
            node = cluster.getConnectionAsync(target.substring(0, colon), Integer.parseInt(target.substring(colon + 1)));
        } else {
            RedisClusterNode master = cluster.getPartitions().getMasterBySlot(slot);
            if (master == null) {
                return CompletableFuture.failedFuture(new RedisException("no master serves slot " + slot));
            }
            node = cluster.getConnectionAsync(master.getNodeId());
        }
        CompletableFuture<T> sent = node.thenCompose(n -> {
            Once<T> c = new Once<>(make.get());
            n.dispatch(asking ? List.of(new Command<>(CommandType.ASKING, new StatusOutput<>(StringCodec.UTF8)), c) : List.of(c));
            return c;
        });
        return sent.handle((v, e) -> {
            if (e == null) {
                return CompletableFuture.completedFuture(v);
            }
            Throwable cause = RedisLocks.causeOf(e);
            String[] words = cause instanceof RedisCommandExecutionException ? String.valueOf(cause.getMessage()).split(" ") : new String[0];
            boolean moved = words.length == 3 && words[0].equals("MOVED");
            if (redirects > 0 && (moved || words.length == 3 && words[0].equals("ASK"))) {
                if (moved) {
                    refresh.run();
                }
                return onceOnNode(slot, make, words[2], !moved, redirects - 1);
            }
            return CompletableFuture.<T>failedFuture(cause);
        }).thenCompose(f -> f);
    }

    private static CommandArgs<String, String> args(String key, Object... args) {
        return rest(new CommandArgs<>(StringCodec.UTF8).addKey(key), args);
    }

    private static CommandArgs<String, String> args(List<String> keys, Object... args) {
        return rest(new CommandArgs<>(StringCodec.UTF8).add(keys.size()).addKeys(keys), args);
    }

    private static CommandArgs<String, String> rest(CommandArgs<String, String> a, Object... args) {
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
     * written one fails there, and a failed command is never written. On a cluster it goes on a
     * node's own connection, unwrapped, so the same holds there. (Not when the client records
     * command latencies: then it is cancelled when its bound ends.)
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
     * Runs {@code then} once when the connection drops (on Lettuce's I/O thread), and closes it
     * so that it is not connected again: a session hold's link (rule 6), whose hold ends with it
     * even when Lettuce could reconnect (a new connection is no session, and a restarted server
     * keeps a session hold until its lease ends: renewals on the new connection would keep it).
     */
    void onDisconnected(Runnable then) {
        if (connection instanceof RedisChannelHandler<?, ?> handler) {
            handler.addListener(new RedisConnectionStateListener() {
                private boolean told;

                @Override
                public void onRedisDisconnected(RedisChannelHandler<?, ?> c) {
                    synchronized (this) {
                        if (told) {
                            return;
                        }
                        told = true;
                    }
                    closeAsync();
                    then.run();
                }
            });
        }
    }

    /** Lifts the client's own command timeout for a wait of this long (rule 2). */
    void timeout(Duration d) {
        connection.setTimeout(d);
    }

    /** Whether this is a cluster's link (renewals go to each slot's master on it). */
    boolean isCluster() {
        return cluster != null;
    }

    /** A renewal met a retryable reply (rule 19) on a cluster: the map of slots is loaded again. */
    void refreshTopology() {
        refresh.run();
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
        if (connection instanceof RedisChannelHandler<?, ?> h && h.isClosed()) {
            // closed already (a session's drop, then its release): Lettuce would warn (rule 18)
            return CompletableFuture.completedFuture(null);
        }
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
