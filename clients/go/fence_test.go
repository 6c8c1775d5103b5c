package redislock_test

// Rule 13, fenced transactions (docs/fencing.md), on PostgreSQL, MariaDB and SQLite: the
// schedule that sells 101 of 100 with the old recipe, run through Fenced (one sale, the stale
// holder refused) and with the old recipe (two sales: it bites); a holder paused inside its
// transaction; Fence, CreateFenceTable and the options; and, without a database, the dialects
// and the checks of the options.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// A shop is one test's tables: stock (sku9: 100, fence 0, the old recipe's column), sales
// (one row per sale), and its fence table; key is the lock of sku9.
type shop struct {
	db                   *testDB
	stock, sales, fences string
	key                  string
}

func newShop(t testing.TB, db *testDB) *shop {
	t.Helper()
	s := &shop{db: db, stock: unique("stock"), sales: unique("sales"), fences: unique("fences"), key: "{sku9}:lock"}
	for _, stmt := range []string{
		"CREATE TABLE " + s.stock + " (sku VARCHAR(32) PRIMARY KEY, qty INTEGER NOT NULL, fence BIGINT NOT NULL)",
		"INSERT INTO " + s.stock + " (sku, qty, fence) VALUES ('sku9', 100, 0)",
		"CREATE TABLE " + s.sales + " (who VARCHAR(64) NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := redislock.CreateFenceTable(ctx, db.DB, s.opts()...); err != nil {
		t.Fatal(err)
	}
	return s
}

// opts are the FenceOptions of this shop's fence table.
func (s *shop) opts(more ...redislock.FenceOption) []redislock.FenceOption {
	return append([]redislock.FenceOption{redislock.FenceTable(s.fences)}, more...)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// read is the stock of sku9, read with q.
func (s *shop) read(ctx context.Context, q querier) (int, error) {
	var qty int
	err := q.QueryRowContext(ctx, "SELECT qty FROM "+s.stock+" WHERE sku = 'sku9'").Scan(&qty)
	return qty, err
}

// sell writes the stock read minus one and records who sold it, with q (a fenced
// transaction: plain statements, no token).
func (s *shop) sell(ctx context.Context, q querier, who string, read int) error {
	if _, err := q.ExecContext(ctx, s.db.q("UPDATE "+s.stock+" SET qty = ? WHERE sku = 'sku9'"), read-1); err != nil {
		return err
	}
	_, err := q.ExecContext(ctx, s.db.q("INSERT INTO "+s.sales+" (who) VALUES (?)"), who)
	return err
}

// left and sold: the stock, and the sales recorded.
func (s *shop) left(t testing.TB) int {
	t.Helper()
	qty, err := s.read(ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	return qty
}

func (s *shop) sold(t testing.TB) int {
	t.Helper()
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM "+s.sales).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// stored is the token in the fence table's row name (0: no row).
func (s *shop) stored(t testing.TB, name string) int64 {
	t.Helper()
	var token int64
	err := s.db.QueryRowContext(ctx, s.db.q("SELECT token FROM "+s.fences+" WHERE name = ?"), name).Scan(&token)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return token
}

// locker is a Locker on a server of this test's own.
func locker(t testing.TB) *redislock.Locker {
	t.Helper()
	l := redislock.New(client(t, server(t)))
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// handOver is the schedule up to B's grant: A holds key with a fixed lease of
// sellerLease (no watchdog), then B asks with WAIT and is granted when A's lease ends.
func handOver(t testing.TB, l *redislock.Locker, key string) (a, b *redislock.Lock) {
	t.Helper()
	a = obtain(t, l, key, sellerLease, redislock.WithWatchdog(false))
	b = obtain(t, l, key, 10*time.Second, redislock.WithWait(5*time.Second))
	if b.Token() <= a.Token() {
		t.Fatalf("tokens: A %d, B %d", a.Token(), b.Token())
	}
	t.Cleanup(func() { _, _ = b.Release(ctx) })
	return a, b
}

// within is the value ch delivers within limit, or fails the test.
func within[T any](t testing.TB, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("%s: not within %v", what, limit)
		var zero T
		return zero
	}
}

// Rule 13, the schedule through the helper: B (the newer holder) has read 100 in its
// fenced transaction when A, whose lease ran out, enters the helper with its older token. A's
// fence statement waits for B's fence row (or comes after B's commit): either way A gets
// ErrStale, its function never runs, and one unit is sold.
func TestFencedRefusesTheStaleHolderWhileTheNewerOneReadsAndWrites(t *testing.T) {
	eachDB(t, func(t *testing.T, db *testDB) {
		s := newShop(t, db)
		a, b := handOver(t, locker(t), s.key)
		var aRan atomic.Bool
		aDone := make(chan error, 1)
		var waited bool
		err := redislock.Fenced(ctx, db.DB, b, func(tx *sql.Tx) error {
			qty, err := s.read(ctx, tx)
			if err != nil || qty != 100 {
				t.Errorf("B read %d, %v; want 100", qty, err)
			}
			go func() {
				aDone <- redislock.Fenced(ctx, db.DB, a, func(tx *sql.Tx) error {
					aRan.Store(true)
					qty, err := s.read(ctx, tx)
					if err != nil {
						return err
					}
					return s.sell(ctx, tx, "A", qty)
				}, s.opts()...)
			}()
			waited = db.blocked(3 * time.Second)
			return s.sell(ctx, tx, "B", qty)
		}, s.opts()...)
		if err != nil {
			t.Fatalf("B: %v", err)
		}
		errA := within(t, aDone, 30*time.Second, "A's Fenced")
		if !errors.Is(errA, redislock.ErrStale) || aRan.Load() {
			t.Fatalf("A: %v (its function ran: %v); want ErrStale before its function", errA, aRan.Load())
		}
		if !strings.Contains(errA.Error(), s.key) || !strings.Contains(errA.Error(), itoa(a.Token())) {
			t.Fatalf("A's error %q does not name the fence %s and the token %d", errA, s.key, a.Token())
		}
		if left, sold := s.left(t), s.sold(t); left != 99 || sold != 1 {
			t.Fatalf("%d left, %d sold; want 99 and 1", left, sold)
		}
		if got := s.stored(t, s.key); got != b.Token() {
			t.Fatalf("fence %d, want B's token %d", got, b.Token())
		}
		t.Logf("A's fence statement waited for B's row lock: %v; %v", waited, errA)
	})
}

// The same schedule with the recipe docs/fencing.md calls wrong: the token only in the write
// (UPDATE ... SET qty = :read-1, fence = :t WHERE fence <= :t), reads outside any fence. Both
// writes pass their token check and two units are sold with 99 left: the lost update this
// rule exists for.
func TestWithoutTheFenceTableTheOldRecipeLosesAnUpdate(t *testing.T) {
	eachDB(t, func(t *testing.T, db *testDB) {
		s := newShop(t, db)
		l := locker(t)
		a := obtain(t, l, s.key, sellerLease, redislock.WithWatchdog(false))
		readA, err := s.read(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		// A pauses: its lease runs out, B is granted and reads.
		b := obtain(t, l, s.key, 10*time.Second, redislock.WithWait(5*time.Second))
		defer func() { _, _ = b.Release(ctx) }()
		readB, err := s.read(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		write := func(read int, token int64) int64 {
			res, err := db.ExecContext(ctx, db.q("UPDATE "+s.stock+" SET qty = ?, fence = ? WHERE sku = 'sku9' AND fence <= ?"),
				read-1, token, token)
			if err != nil {
				t.Fatal(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		wroteA, wroteB := write(readA, a.Token()), write(readB, b.Token())
		if wroteA != 1 || wroteB != 1 || s.left(t) != 99 {
			t.Fatalf("A wrote %d row, B %d, %d left; the old recipe should sell two and leave 99", wroteA, wroteB, s.left(t))
		}
	})
}

// A holder paused inside its transaction: A has raised the fence and read 100 when its lease
// runs out; B is granted and enters the helper, whose fence statement waits for A's row (on
// SQLite, for A's write lock); A writes 99 and commits; B then reads 99 and writes 98. Two
// sales, 98 left, no error: whichever commits first, the other reads what it wrote.
func TestAFencedHolderPausedInItsTransactionCommitsAndTheNextReadsItsWrite(t *testing.T) {
	eachDB(t, func(t *testing.T, db *testDB) {
		s := newShop(t, db)
		l := locker(t)
		a := obtain(t, l, s.key, sellerLease, redislock.WithWatchdog(false))
		type sale struct {
			read int
			err  error
		}
		bDone := make(chan sale, 1)
		var waited bool
		err := redislock.Fenced(ctx, db.DB, a, func(tx *sql.Tx) error {
			qty, err := s.read(ctx, tx)
			if err != nil || qty != 100 {
				t.Errorf("A read %d, %v; want 100", qty, err)
			}
			// A stays in its transaction past its lease: B is granted and enters the helper.
			b := obtain(t, l, s.key, 10*time.Second, redislock.WithWait(5*time.Second))
			t.Cleanup(func() { _, _ = b.Release(ctx) })
			go func() {
				var read int
				err := redislock.Fenced(ctx, db.DB, b, func(tx *sql.Tx) error {
					var err error
					if read, err = s.read(ctx, tx); err != nil {
						return err
					}
					return s.sell(ctx, tx, "B", read)
				}, s.opts()...)
				bDone <- sale{read, err}
			}()
			waited = db.blocked(3 * time.Second)
			return s.sell(ctx, tx, "A", qty)
		}, s.opts()...)
		if err != nil {
			t.Fatalf("A: %v", err)
		}
		b := within(t, bDone, 30*time.Second, "B's Fenced")
		if b.err != nil || b.read != 99 {
			t.Fatalf("B read %d: %v; want 99 and no error", b.read, b.err)
		}
		if left, sold := s.left(t), s.sold(t); left != 98 || sold != 2 {
			t.Fatalf("%d left, %d sold; want 98 and 2", left, sold)
		}
		t.Logf("B's fence statement waited for A's row lock: %v", waited)
	})
}

// olderAndNewer are two holds of key, the first released before the second is granted.
func olderAndNewer(t testing.TB, l *redislock.Locker, key string) (older, newer *redislock.Lock) {
	t.Helper()
	older = obtain(t, l, key, 10*time.Second)
	release(t, older, true)
	newer = obtain(t, l, key, 10*time.Second)
	t.Cleanup(func() { _, _ = newer.Release(ctx) })
	return older, newer
}

// Fenced commits when its function returns nil, keeps the token in the fence row (named by the
// lock's key, or FenceName), lets one hold run several transactions, and rolls everything back
// (the fence too) when its function fails or panics, returning the function's error unchanged.
func TestFencedCommitsRollsBackAndReturnsTheFunctionsError(t *testing.T) {
	eachDB(t, func(t *testing.T, db *testDB) {
		s := newShop(t, db)
		l := locker(t)
		older, newer := olderAndNewer(t, l, s.key)

		boom := errors.New("the payment failed")
		err := redislock.Fenced(ctx, db.DB, newer, func(tx *sql.Tx) error {
			if err := s.sell(ctx, tx, "newer", 100); err != nil {
				return err
			}
			return boom
		}, s.opts()...)
		if err != boom {
			t.Fatalf("Fenced returned %v; want the function's error unchanged", err)
		}
		if s.left(t) != 100 || s.sold(t) != 0 || s.stored(t, s.key) != 0 {
			t.Fatalf("after a failed function: %d left, %d sold, fence %d; want all rolled back",
				s.left(t), s.sold(t), s.stored(t, s.key))
		}

		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the function's panic did not reach the caller")
				}
			}()
			_ = redislock.Fenced(ctx, db.DB, newer, func(tx *sql.Tx) error {
				_ = s.sell(ctx, tx, "newer", 100)
				panic("the function panics")
			}, s.opts()...)
		}()
		if s.left(t) != 100 || s.stored(t, s.key) != 0 {
			t.Fatalf("after a panic: %d left, fence %d; want all rolled back", s.left(t), s.stored(t, s.key))
		}

		// One hold, two transactions: the fence is <=, the same token passes again.
		for range 2 {
			err := redislock.Fenced(ctx, db.DB, newer, func(tx *sql.Tx) error {
				qty, err := s.read(ctx, tx)
				if err != nil {
					return err
				}
				return s.sell(ctx, tx, "newer", qty)
			}, s.opts()...)
			if err != nil {
				t.Fatal(err)
			}
		}
		if s.left(t) != 98 || s.stored(t, s.key) != newer.Token() {
			t.Fatalf("%d left, fence %d; want 98 and %d", s.left(t), s.stored(t, s.key), newer.Token())
		}
		err = redislock.Fenced(ctx, db.DB, older, func(*sql.Tx) error {
			t.Error("the older hold's function ran")
			return nil
		}, s.opts()...)
		if !errors.Is(err, redislock.ErrStale) {
			t.Fatalf("the older hold: %v; want ErrStale", err)
		}

		// FenceName: the row is named by the caller, not by the lock's key.
		err = redislock.Fenced(ctx, db.DB, newer, func(*sql.Tx) error { return nil },
			s.opts(redislock.FenceName("stock/sku9"))...)
		if err != nil || s.stored(t, "stock/sku9") != newer.Token() {
			t.Fatalf("FenceName: %v, fence %d", err, s.stored(t, "stock/sku9"))
		}
	})
}

// Fence raises the fence in a transaction the caller manages (the dialect named with
// FenceDialect): nil for the newest hold, ErrStale for an older one, an error without
// FenceDialect. The caller commits or rolls back.
func TestFenceInATransactionTheCallerManages(t *testing.T) {
	eachDB(t, func(t *testing.T, db *testDB) {
		s := newShop(t, db)
		older, newer := olderAndNewer(t, locker(t), s.key)
		dialect := redislock.FenceDialect(db.Dialect)

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := redislock.Fence(ctx, tx, newer, s.opts()...); err == nil || !strings.Contains(err.Error(), "FenceDialect") {
			t.Fatalf("Fence without FenceDialect: %v", err)
		}
		if err := redislock.Fence(ctx, tx, newer, s.opts(dialect)...); err != nil {
			t.Fatal(err)
		}
		qty, err := s.read(ctx, tx)
		if err == nil {
			err = s.sell(ctx, tx, "newer", qty)
		}
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			t.Fatal(err)
		}

		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = redislock.Fence(ctx, tx, older, s.opts(dialect)...)
		_ = tx.Rollback()
		if !errors.Is(err, redislock.ErrStale) || !strings.Contains(err.Error(), itoa(older.Token())) {
			t.Fatalf("Fence of the older hold: %v; want ErrStale naming token %d", err, older.Token())
		}
		if s.left(t) != 99 || s.stored(t, s.key) != newer.Token() {
			t.Fatalf("%d left, fence %d", s.left(t), s.stored(t, s.key))
		}
	})
}

// CreateFenceTable creates the table of docs/fencing.md once (again: nothing happens), also
// schema-qualified (PostgreSQL's schema, MariaDB's database, SQLite's main), where Fenced
// then works and refuses an older token.
func TestCreateFenceTableIsIdempotentAndTakesASchemaQualifiedName(t *testing.T) {
	eachDB(t, func(t *testing.T, db *testDB) {
		schema := "main"
		switch db.Dialect {
		case redislock.Postgres:
			schema = unique("app")
			if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
				t.Fatal(err)
			}
		case redislock.MySQL:
			schema = unique("app")
			if _, err := db.ExecContext(ctx, "CREATE DATABASE "+schema); err != nil {
				t.Fatal(err)
			}
		}
		table := redislock.FenceTable(schema + "." + unique("fences"))
		for range 2 {
			if err := redislock.CreateFenceTable(ctx, db.DB, table); err != nil {
				t.Fatal(err)
			}
		}
		older, newer := olderAndNewer(t, locker(t), "{sku9}:lock")
		noop := func(*sql.Tx) error { return nil }
		if err := redislock.Fenced(ctx, db.DB, newer, noop, table); err != nil {
			t.Fatal(err)
		}
		if err := redislock.Fenced(ctx, db.DB, older, noop, table); !errors.Is(err, redislock.ErrStale) {
			t.Fatalf("the older hold: %v; want ErrStale", err)
		}
	})
}

// A driver that DialectOf does not know (it connects nowhere).
type unknownDriver struct{}

func (unknownDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("unknown: no connection")
}

type unknownConnector struct{}

func (unknownConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("unknown: no connection")
}
func (unknownConnector) Driver() driver.Driver { return unknownDriver{} }

// The dialect comes from the driver's package (pgx's stdlib, go-sql-driver/mysql,
// modernc.org/sqlite), by sql.Open or sql.OpenDB; another driver is a clear error unless
// FenceDialect names it.
func TestFenceDialectsAreFoundFromTheDriversPackage(t *testing.T) {
	pgConfig, err := pgx.ParseConfig("postgresql://postgres@127.0.0.1:1/postgres")
	if err != nil {
		t.Fatal(err)
	}
	myConnector, err := mysql.NewConnector(mysql.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	open := func(driver, dsn string) *sql.DB {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	for _, c := range []struct {
		db   *sql.DB
		want redislock.Dialect
	}{
		{open("pgx", "postgresql://postgres@127.0.0.1:1/postgres"), redislock.Postgres},
		{stdlib.OpenDB(*pgConfig), redislock.Postgres},
		{open("mysql", "lock@tcp(127.0.0.1:1)/test"), redislock.MySQL},
		{sql.OpenDB(myConnector), redislock.MySQL},
		{open("sqlite", "file:"+t.TempDir()+"/x.db"), redislock.SQLite},
	} {
		got, err := redislock.DialectOf(c.db)
		if got != c.want || err != nil {
			t.Errorf("DialectOf(%T) = %v, %v; want %v", c.db.Driver(), got, err, c.want)
		}
		_ = c.db.Close()
	}

	db := sql.OpenDB(unknownConnector{})
	defer db.Close()
	if _, err := redislock.DialectOf(db); err == nil || !strings.Contains(err.Error(), "FenceDialect") {
		t.Fatalf("DialectOf(an unknown driver): %v; want an error pointing to FenceDialect", err)
	}
	lock := &redislock.Lock{}
	noop := func(*sql.Tx) error { return nil }
	if err := redislock.Fenced(ctx, db, lock, noop); err == nil || !strings.Contains(err.Error(), "FenceDialect") {
		t.Fatalf("Fenced on an unknown driver: %v", err)
	}
	if err := redislock.CreateFenceTable(ctx, db); err == nil || !strings.Contains(err.Error(), "FenceDialect") {
		t.Fatalf("CreateFenceTable on an unknown driver: %v", err)
	}
	// Named: the helper goes on to the database (which this driver cannot reach).
	named := redislock.FenceDialect(redislock.Postgres)
	if err := redislock.Fenced(ctx, db, lock, noop, named); err == nil || !strings.Contains(err.Error(), "no connection") {
		t.Fatalf("Fenced with FenceDialect: %v; want the driver's error", err)
	}
	if redislock.Postgres.String() != "PostgreSQL" || redislock.MySQL.String() != "MySQL" || redislock.SQLite.String() != "SQLite" {
		t.Fatal("the dialects' names")
	}
}

// The options are checked before the database is touched: a table name is an identifier,
// optionally schema-qualified, never quoted; a fence has a name; a dialect is one of the three.
func TestFenceOptionsAreCheckedBeforeTheDatabaseIsTouched(t *testing.T) {
	db := sql.OpenDB(unknownConnector{})
	defer db.Close()
	named := redislock.FenceDialect(redislock.SQLite)
	create := func(opts ...redislock.FenceOption) error {
		return redislock.CreateFenceTable(ctx, db, append([]redislock.FenceOption{named}, opts...)...)
	}
	for _, table := range []string{"", "lock fences", "1fences", "a.b.c", "fences;DROP TABLE stock", `"fences"`, "app.", ".fences", "fénces"} {
		if err := create(redislock.FenceTable(table)); err == nil || !strings.Contains(err.Error(), "FenceTable") {
			t.Errorf("FenceTable(%q): %v; want refused", table, err)
		}
	}
	for _, table := range []string{"lock_fences", "_f9", "app.lock_fences", "App_2.F"} {
		if err := create(redislock.FenceTable(table)); err == nil || !strings.Contains(err.Error(), "no connection") {
			t.Errorf("FenceTable(%q): %v; want accepted (then the driver's error)", table, err)
		}
	}
	if err := create(redislock.FenceDialect(redislock.Dialect(9))); err == nil || !strings.Contains(err.Error(), "not a dialect") {
		t.Errorf("FenceDialect(9): %v", err)
	}
	lock := &redislock.Lock{}
	noop := func(*sql.Tx) error { return nil }
	if err := redislock.Fenced(ctx, db, lock, noop, named, redislock.FenceName("")); err == nil || !strings.Contains(err.Error(), "FenceName") {
		t.Errorf(`FenceName(""): %v`, err)
	}
	for _, err := range []error{
		redislock.Fenced(ctx, nil, lock, noop, named),
		redislock.Fenced(ctx, db, nil, noop, named),
		redislock.Fenced(ctx, db, lock, nil, named),
		redislock.Fence(ctx, nil, lock, named),
		redislock.CreateFenceTable(ctx, nil, named),
	} {
		if err == nil || !strings.Contains(err.Error(), "needs") {
			t.Errorf("a nil argument: %v", err)
		}
	}
}
