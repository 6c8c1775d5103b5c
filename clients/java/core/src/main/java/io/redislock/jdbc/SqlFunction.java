package io.redislock.jdbc;

import java.sql.SQLException;

/** A function that may throw {@link SQLException}: the body of {@link JdbcFence#inTransaction}. */
@FunctionalInterface
public interface SqlFunction<T, R> {
    R apply(T t) throws SQLException;
}
