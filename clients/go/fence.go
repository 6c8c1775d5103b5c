package redislock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
)

// A FenceOption changes how Fenced, Fence and CreateFenceTable use the fence table.
type FenceOption func(*fenceOptions)

type fenceOptions struct {
	name, table string
	nameSet     bool
	dialect     Dialect
	tx          *sql.TxOptions
}

// The fence table unless FenceTable names another.
const defaultFenceTable = "lock_fences"

// FenceName names the fence (its row in the fence table) instead of the lock's key.
func FenceName(name string) FenceOption {
	return func(o *fenceOptions) { o.name, o.nameSet = name, true }
}

// FenceTable names the fence table (default lock_fences): an identifier, optionally
// schema-qualified (app.lock_fences), never quoted.
func FenceTable(table string) FenceOption {
	return func(o *fenceOptions) { o.table = table }
}

// FenceDialect names the database's dialect instead of finding it from the driver (a driver
// that DialectOf does not know, or Fence, whose *sql.Tx does not tell its driver).
func FenceDialect(d Dialect) FenceOption {
	return func(o *fenceOptions) { o.dialect = d }
}

// FenceTxOptions are the options Fenced begins its transaction with (default: the driver's,
// READ COMMITTED on PostgreSQL, REPEATABLE READ on InnoDB). Under PostgreSQL's REPEATABLE READ
// or SERIALIZABLE a transaction that waited for the fence row fails with 40001: run it again.
func FenceTxOptions(opts *sql.TxOptions) FenceOption {
	return func(o *fenceOptions) { o.tx = opts }
}

// A table name: an identifier, optionally schema-qualified.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func fenceOpts(opts []FenceOption) (*fenceOptions, error) {
	o := &fenceOptions{table: defaultFenceTable}
	for _, opt := range opts {
		opt(o)
	}
	switch {
	case !tableName.MatchString(o.table):
		return nil, fmt.Errorf("redislock: FenceTable(%q): not a table name "+
			"([A-Za-z_][A-Za-z0-9_]*, optionally schema.table)", o.table)
	case o.nameSet && o.name == "":
		return nil, errors.New(`redislock: FenceName(""): a fence needs a name`)
	case o.dialect != 0 && !o.dialect.valid():
		return nil, fmt.Errorf("redislock: FenceDialect(%v): not a dialect", o.dialect)
	}
	return o, nil
}

// dialectOf is the named dialect, else db's.
func (o *fenceOptions) dialectOf(db *sql.DB) (Dialect, error) {
	if o.dialect != 0 {
		return o.dialect, nil
	}
	return DialectOf(db)
}

// Fenced runs fn in a transaction of db that lock's fencing token guards (docs/fencing.md):
// it begins the transaction, raises the fence as its first statement (stores the token in the
// fence table's row for the fence unless a larger token is stored, and holds that row's lock
// until the transaction ends), runs fn with the transaction, and commits when fn returns nil.
//
// When a larger token is stored, a newer holder of the lock has been in: Fenced rolls back
// before fn runs and returns an error matching ErrStale that names the fence and the token.
// When fn returns an error, Fenced rolls back and returns that error unchanged (when fn
// panics, it rolls back and the panic goes on).
// fn must not commit or roll back the transaction itself.
//
// Whichever of two holders' transactions raises the fence first, the other waits for it to
// end and then reads what it wrote, or finds the newer token and is refused: a holder paused
// past its lease cannot lose the next holder's update. The database decides, not the lease:
// Fenced does not check that the hold is still live, and it retries nothing: a deadlock or a
// serialization failure is returned with the driver's error in it (errors.As finds it); run
// the transaction again, under a hold.
//
// The fence table must exist (CreateFenceTable). The dialect is found from db's driver
// (DialectOf) unless FenceDialect names it. On SQLite, set a busy timeout so the next holder
// waits for the write lock, and preferably _txlock=immediate (modernc.org/sqlite,
// mattn/go-sqlite3) so the transaction takes the write lock when it begins.
func Fenced(ctx context.Context, db *sql.DB, lock *Lock, fn func(*sql.Tx) error, opts ...FenceOption) error {
	if db == nil || lock == nil || fn == nil {
		return errors.New("redislock: Fenced needs a *sql.DB, a Lock and a function")
	}
	o, err := fenceOpts(opts)
	if err != nil {
		return err
	}
	d, err := o.dialectOf(db)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, o.tx)
	if err != nil {
		return err
	}
	// Rolls back when fn fails or panics, or the fence is stale; a no-op after Commit.
	defer func() { _ = tx.Rollback() }()
	if err := o.raise(ctx, tx, d, lock); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Fence raises lock's fence in tx, a transaction the caller (or a framework) began and will
// end: run it as the transaction's first statement, before any read. It returns an error
// matching ErrStale when a larger token is stored; the caller must then roll back. The dialect
// must be named with FenceDialect (a *sql.Tx does not tell its driver; DialectOf finds it from
// the *sql.DB).
func Fence(ctx context.Context, tx *sql.Tx, lock *Lock, opts ...FenceOption) error {
	if tx == nil || lock == nil {
		return errors.New("redislock: Fence needs a *sql.Tx and a Lock")
	}
	o, err := fenceOpts(opts)
	if err != nil {
		return err
	}
	if o.dialect == 0 {
		return errors.New("redislock: Fence needs FenceDialect: a *sql.Tx does not tell its " +
			"driver (DialectOf(db) finds it from the *sql.DB)")
	}
	return o.raise(ctx, tx, o.dialect, lock)
}

// CreateFenceTable creates the fence table (lock_fences, or FenceTable's) in db unless it
// exists: CREATE TABLE IF NOT EXISTS with the DDL of docs/fencing.md for the dialect of db's
// driver, or FenceDialect's. Fenced never creates it.
func CreateFenceTable(ctx context.Context, db *sql.DB, opts ...FenceOption) error {
	if db == nil {
		return errors.New("redislock: CreateFenceTable needs a *sql.DB")
	}
	o, err := fenceOpts(opts)
	if err != nil {
		return err
	}
	d, err := o.dialectOf(db)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, d.createSQL(o.table))
	return err
}

// raise runs the fence statement of d in tx with lock's token: nil when the fence is lock's,
// an error matching ErrStale when a larger token is stored.
func (o *fenceOptions) raise(ctx context.Context, tx *sql.Tx, d Dialect, lock *Lock) error {
	name, token := lock.Key(), lock.Token()
	if o.nameSet {
		name = o.name
	}
	upsert, readBack := d.fenceSQL(o.table)
	res, err := tx.ExecContext(ctx, upsert, name, token)
	if err != nil {
		return fmt.Errorf("redislock: fence %q in %s: %w", name, o.table, err)
	}
	if readBack == "" {
		// PostgreSQL, SQLite: 1 row, the fence is raised (or was this token already); 0 rows,
		// the upsert's condition was false: a larger token is stored.
		n, err := res.RowsAffected()
		switch {
		case err != nil:
			return fmt.Errorf("redislock: fence %q in %s: %w", name, o.table, err)
		case n == 0:
			return fmt.Errorf("%w: fence %q in %s holds a newer token than %d", ErrStale, name, o.table, token)
		case n != 1:
			return fmt.Errorf("redislock: fence %q in %s: the fence statement changed %d rows", name, o.table, n)
		}
		return nil
	}
	// MySQL: the stored token, read under the row lock the upsert took.
	var stored int64
	if err := tx.QueryRowContext(ctx, readBack, name).Scan(&stored); err != nil {
		return fmt.Errorf("redislock: fence %q in %s: %w", name, o.table, err)
	}
	switch {
	case stored > token:
		return fmt.Errorf("%w: fence %q in %s holds token %d, newer than %d", ErrStale, name, o.table, stored, token)
	case stored < token:
		return fmt.Errorf("redislock: fence %q in %s holds token %d after raising it to %d", name, o.table, stored, token)
	}
	return nil
}
