package io.redislock.jdbc;

import io.redislock.Hold;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.regex.Pattern;

/**
 * Which fence a {@link JdbcFence} raises and where: the fence's name (the hold's lock key unless
 * given), the table ({@code lock_fences} unless given) and the database's dialect (found from the
 * connection unless given). Immutable: each method returns a copy.
 */
public final class FenceOptions {
    /** A table name the statements may carry as it is: an identifier, optionally schema-qualified. */
    private static final Pattern TABLE = Pattern.compile("[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)?");
    private static final FenceOptions DEFAULTS = new FenceOptions(null, "lock_fences", null);

    private final String name;
    private final String table;
    private final Dialect dialect;

    private FenceOptions(String name, String table, Dialect dialect) {
        this.name = name;
        this.table = table;
        this.dialect = dialect;
    }

    /** The fence named by the hold's key, in {@code lock_fences}, the dialect found from the connection. */
    public static FenceOptions defaults() {
        return DEFAULTS;
    }

    /** The fence's name (its row in the table), instead of the hold's lock key. */
    public FenceOptions name(String name) {
        if (name.isEmpty()) {
            throw new IllegalArgumentException("a fence's name must not be empty");
        }
        return new FenceOptions(name, table, dialect);
    }

    /**
     * The fence table, instead of {@code lock_fences}: an identifier ({@code [A-Za-z_][A-Za-z0-9_]*}),
     * optionally schema-qualified ({@code inventory.lock_fences}); anything else is refused.
     */
    public FenceOptions table(String table) {
        if (!TABLE.matcher(table).matches()) {
            throw new IllegalArgumentException("not a table name ([A-Za-z_][A-Za-z0-9_]*, optionally schema.table): "
                    + table);
        }
        return new FenceOptions(name, table, dialect);
    }

    /** The database's dialect, instead of the one its product name gives (or for a driver that gives none of them). */
    public FenceOptions dialect(Dialect dialect) {
        if (dialect == null) {
            throw new IllegalArgumentException("dialect must not be null");
        }
        return new FenceOptions(name, table, dialect);
    }

    String table() {
        return table;
    }

    String nameFor(Hold hold) {
        return name != null ? name : hold.key();
    }

    Dialect dialectOf(Connection connection) throws SQLException {
        return dialect != null ? dialect : Dialect.detect(connection);
    }

    @Override
    public String toString() {
        return "FenceOptions[name=" + (name != null ? name : "the hold's key") + ", table=" + table + ", dialect="
                + (dialect != null ? dialect : "detected") + "]";
    }
}
