package redislock_test

// The databases of the fenced-transaction tests: a throwaway PostgreSQL and MariaDB
// (scripts/testdb.sh, started once per test process, when a test first needs one, and stopped
// by TestMain) and an SQLite file; each test makes tables of its own.

import (
	"bufio"
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

// A database server (or file) the tests use: which one, and how to open it.
type database struct {
	Kind    string // postgres, mariadb or sqlite
	Driver  string // database/sql's driver name
	DSN     string
	Dialect redislock.Dialect
	dir     string // testdb.sh's directory, or the SQLite file's
}

var dbKinds = []string{"postgres", "mariadb", "sqlite"}

var (
	dbMu      sync.Mutex
	databases = map[string]*database{}
	dbErrors  = map[string]error{}
)

// startDatabase is the process's database of kind, started the first time it is asked for.
func startDatabase(kind string) (*database, error) {
	dbMu.Lock()
	defer dbMu.Unlock()
	if d, ok := databases[kind]; ok {
		return d, nil
	}
	if err, ok := dbErrors[kind]; ok {
		return nil, err
	}
	d, err := launch(kind)
	if err != nil {
		dbErrors[kind] = err
		return nil, err
	}
	databases[kind] = d
	return d, nil
}

func launch(kind string) (*database, error) {
	dir, err := os.MkdirTemp("", "redislock-go-"+kind+"-")
	if err != nil {
		return nil, err
	}
	if kind == "sqlite" {
		// The write lock is taken when a transaction begins (_txlock=immediate); the next
		// writer waits for it up to 20 s instead of failing with SQLITE_BUSY.
		file := filepath.Join(dir, "test.db")
		return &database{Kind: kind, Driver: "sqlite", Dialect: redislock.SQLite, dir: dir,
			DSN: "file:" + file + "?_txlock=immediate&_pragma=busy_timeout(20000)"}, nil
	}
	script := filepath.Join(testserver.Root(), "scripts", "testdb.sh")
	var out, stderr bytes.Buffer
	cmd := exec.Command(script, "start", kind, dir, strconv.Itoa(os.Getpid()))
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		_ = exec.Command(script, "stop", dir).Run() // what the failed start left, by PID
		return nil, fmt.Errorf("scripts/testdb.sh start %s: %v: %s", kind, err, stderr.String())
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	d := &database{Kind: kind, dir: dir}
	switch kind {
	case "postgres":
		d.Driver, d.Dialect, d.DSN = "pgx", redislock.Postgres, vars["URL"]
	case "mariadb":
		d.Driver, d.Dialect = "mysql", redislock.MySQL
		d.DSN = fmt.Sprintf("%s@tcp(127.0.0.1:%s)/%s", vars["USER"], vars["PORT"], vars["DATABASE"])
	}
	if vars["PORT"] == "" {
		stopDatabase(d)
		return nil, fmt.Errorf("scripts/testdb.sh start %s printed no PORT: %s", kind, out.String())
	}
	return d, nil
}

func stopDatabase(d *database) {
	if d.Kind == "sqlite" {
		_ = os.RemoveAll(d.dir)
		return
	}
	script := filepath.Join(testserver.Root(), "scripts", "testdb.sh")
	_ = exec.Command(script, "stop", d.dir).Run()
}

// stopDatabases stops every database this process started (TestMain, after the tests).
func stopDatabases() {
	dbMu.Lock()
	defer dbMu.Unlock()
	for kind, d := range databases {
		stopDatabase(d)
		delete(databases, kind)
	}
}

// A testDB is an open pool on a database, closed at the test's end.
type testDB struct {
	*sql.DB
	*database
}

func openDB(t testing.TB, kind string) *testDB {
	t.Helper()
	d, err := startDatabase(kind)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(d.Driver, d.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &testDB{db, d}
}

// eachDB runs test on each database, as a subtest named after it.
func eachDB(t *testing.T, test func(t *testing.T, db *testDB)) {
	for _, kind := range dbKinds {
		t.Run(kind, func(t *testing.T) { test(t, openDB(t, kind)) })
	}
}

// q is query with its ? placeholders as $1, $2... on PostgreSQL.
func (d *database) q(query string) string {
	if d.Dialect != redislock.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

var tables atomic.Int64

// unique is a table (or schema) name no other test of this process uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), tables.Add(1))
}

// blocked waits (up to limit) until a transaction of db waits for a row lock, and says
// whether it saw one. SQLite cannot tell: it waits a moment and says false. The tests do not
// depend on it: a transaction that came later instead of waiting must end the same way.
func (d *testDB) blocked(limit time.Duration) bool {
	query, every := "", 10*time.Millisecond
	switch d.Dialect {
	case redislock.Postgres:
		query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
	case redislock.MySQL:
		// InnoDB refreshes innodb_trx only when it has not been read for 100 ms.
		query, every = "SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'", 150*time.Millisecond
	default:
		time.Sleep(200 * time.Millisecond)
		return false
	}
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(every) {
		var n int
		if d.QueryRowContext(ctx, query).Scan(&n) == nil && n > 0 {
			return true
		}
	}
	return false
}

// retryable: the database ended the transaction for a conflict that running it again
// resolves (a deadlock, a serialization failure, a lock wait given up, SQLite busy).
func retryable(err error) bool {
	var pg *pgconn.PgError
	var my *mysql.MySQLError
	var lite *sqlite.Error
	switch {
	case errors.As(err, &pg):
		return pg.Code == "40001" || pg.Code == "40P01" || pg.Code == "55P03"
	case errors.As(err, &my):
		return my.Number == 1213 || my.Number == 1205
	case errors.As(err, &lite):
		return lite.Code()&0xff == 5 || lite.Code()&0xff == 6 // SQLITE_BUSY, SQLITE_LOCKED
	}
	return false
}

// testDatabaseURL is the URL (DSN) of the process's database of kind, for the examples.
func testDatabaseURL(kind string) string {
	d, err := startDatabase(kind)
	if err != nil {
		panic(err)
	}
	return d.DSN
}
