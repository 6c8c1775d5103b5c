package io.redislock;

import io.lettuce.core.RedisClient;
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
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
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

    /** Sends {@code command key args...}. */
    <T> RedisFuture<T> call(CommandOutput<String, String, T> output, String command, String key, Object... args) {
        CommandArgs<String, String> a = new CommandArgs<>(StringCodec.UTF8).addKey(key);
        for (Object arg : args) {
            if (arg instanceof Long || arg instanceof Integer) {
                a.add(((Number) arg).longValue());
            } else {
                a.add(String.valueOf(arg));
            }
        }
        return async.dispatch(new Name(command), output, a);
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
        return async.dispatch(new Name(command), output, a).toCompletableFuture();
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
        return connection.closeAsync();
    }
}
