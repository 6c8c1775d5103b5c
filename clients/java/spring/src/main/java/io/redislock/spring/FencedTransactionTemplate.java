package io.redislock.spring;

import io.redislock.Hold;
import io.redislock.StaleTokenException;
import io.redislock.jdbc.FenceOptions;
import io.redislock.jdbc.JdbcFence;
import java.util.Objects;
import javax.sql.DataSource;
import org.springframework.jdbc.core.ConnectionCallback;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.IllegalTransactionStateException;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.DefaultTransactionDefinition;
import org.springframework.transaction.support.TransactionCallback;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * Fenced transactions the Spring way (rule 13 of docs/clients.md, docs/fencing.md): a {@link
 * TransactionTemplate} whose transactions begin with the hold's fence. {@link #execute} begins a
 * new transaction of the {@link PlatformTransactionManager}, runs the fence statement ({@link
 * JdbcFence#fence}) on the transaction's own connection of the {@link DataSource} (the one
 * {@code JdbcTemplate}, {@code DataSourceUtils} and the transaction's other users get), then the
 * callback; the template commits, or rolls back on the callback's exception. A larger token in
 * the fence table rolls back before the callback runs and throws {@link StaleTokenException}.
 *
 * <pre>{@code
 * FencedTransactionTemplate fenced = new FencedTransactionTemplate(transactionManager, dataSource);
 * fenced.execute(hold, status -> jdbc.update(...));
 * }</pre>
 *
 * <p>The transaction manager must manage the data source's connections ({@code
 * DataSourceTransactionManager} or {@code JdbcTransactionManager} on it, or a JPA manager that
 * exposes them). The fence must be its transaction's first statement, so the transaction is a
 * new one: joining one already in progress is refused ({@code PROPAGATION_REQUIRES_NEW} runs it
 * apart). Isolation: the database's default (READ COMMITTED on PostgreSQL, REPEATABLE READ on
 * InnoDB) is what docs/fencing.md describes.
 */
public final class FencedTransactionTemplate {
    private final TransactionTemplate transactions;
    private final DataSource dataSource;
    private final JdbcTemplate jdbc;
    private final FenceOptions options;

    /** Transactions with the default definition ({@code PROPAGATION_REQUIRED}), the default fence options. */
    public FencedTransactionTemplate(PlatformTransactionManager transactionManager, DataSource dataSource) {
        this(transactionManager, dataSource, new DefaultTransactionDefinition(), FenceOptions.defaults());
    }

    /** Transactions of {@code definition} (isolation, timeout, propagation), fences of {@code options}. */
    public FencedTransactionTemplate(PlatformTransactionManager transactionManager, DataSource dataSource,
            TransactionDefinition definition, FenceOptions options) {
        this.transactions = new TransactionTemplate(Objects.requireNonNull(transactionManager, "transactionManager"),
                Objects.requireNonNull(definition, "definition"));
        this.dataSource = Objects.requireNonNull(dataSource, "dataSource");
        this.jdbc = new JdbcTemplate(dataSource);
        this.options = Objects.requireNonNull(options, "options");
    }

    /**
     * One fenced transaction: begins it, raises {@code hold}'s fence on its connection, runs
     * {@code action}, commits; what the action returned. The action's exception rolls back and is
     * thrown as {@link TransactionTemplate#execute} throws it; a newer fence, {@link
     * StaleTokenException} (rolled back, the action never run); a SQL error of the fence statement,
     * Spring's {@code DataAccessException}.
     */
    public <T> T execute(Hold hold, TransactionCallback<T> action) {
        Objects.requireNonNull(hold, "hold");
        Objects.requireNonNull(action, "action");
        // Refused before it joins: a failure inside would mark the transaction in progress rollback-only.
        if (transactions.getPropagationBehavior() != TransactionDefinition.PROPAGATION_REQUIRES_NEW
                && TransactionSynchronizationManager.isActualTransactionActive()
                && TransactionSynchronizationManager.hasResource(dataSource)) {
            throw notNew();
        }
        return transactions.execute(status -> {
            if (!status.isNewTransaction()) {
                throw notNew();
            }
            if (!TransactionSynchronizationManager.hasResource(dataSource)) {
                throw new IllegalStateException("the transaction manager does not manage this DataSource's"
                        + " connections: the fence would not be in the transaction");
            }
            jdbc.execute((ConnectionCallback<Void>) connection -> {
                JdbcFence.fence(connection, hold, options);
                return null;
            });
            return action.doInTransaction(status);
        });
    }

    private static IllegalTransactionStateException notNew() {
        return new IllegalTransactionStateException("a fenced transaction must be a new one (its fence is its first"
                + " statement), not a part of one in progress: use PROPAGATION_REQUIRES_NEW");
    }
}
