package io.redislock;

import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.CommandOutput;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;

/** Any reply as Java values: strings, longs, doubles, booleans, null and (nested) lists. */
final class AnyOutput extends CommandOutput<String, String, Object> {
    private final Deque<List<Object>> stack = new ArrayDeque<>();
    private final Deque<Integer> left = new ArrayDeque<>();

    AnyOutput() {
        super(StringCodec.UTF8, null);
    }

    private void put(Object value) {
        if (stack.isEmpty()) {
            output = value;
            return;
        }
        stack.peek().add(value);
        close();
    }

    private void close() {
        while (!stack.isEmpty()) {
            int n = left.pop() - 1;
            if (n > 0) {
                left.push(n);
                return;
            }
            List<Object> done = stack.pop();
            if (stack.isEmpty()) {
                output = done;
                return;
            }
            stack.peek().add(done);
        }
    }

    @Override
    public void set(ByteBuffer bytes) {
        put(bytes == null ? null : decodeString(bytes));
    }

    @Override
    public void setSingle(ByteBuffer bytes) {
        set(bytes);
    }

    @Override
    public void set(long integer) {
        put(integer);
    }

    @Override
    public void set(double number) {
        put(number);
    }

    @Override
    public void set(boolean value) {
        put(value);
    }

    @Override
    public void multi(int count) {
        if (count <= 0) {
            put(count < 0 ? null : new ArrayList<>());
            return;
        }
        stack.push(new ArrayList<>(count));
        left.push(count);
    }

    @Override
    public void multiMap(int count) {
        multi(count * 2);
    }
}
