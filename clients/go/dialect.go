package redislock

import (
	"database/sql"
	"fmt"
	"reflect"
)

// A Dialect is the SQL of a database for the fence table: PostgreSQL, MySQL (and MariaDB) or
// SQLite. Fenced finds it from the *sql.DB's driver; FenceDialect names it.
type Dialect int

// The databases the fence statement is written for (docs/fencing.md). The zero Dialect is
// none: Fenced and CreateFenceTable then find it from the driver.
const (
	Postgres Dialect = iota + 1 // PostgreSQL (pgx's stdlib, lib/pq)
	MySQL                       // MySQL and MariaDB with InnoDB (go-sql-driver/mysql)
	SQLite                      // SQLite 3.24 or newer (modernc.org/sqlite, mattn/go-sqlite3)
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "PostgreSQL"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

func (d Dialect) valid() bool { return d >= Postgres && d <= SQLite }

// The database/sql drivers whose dialect is known, by the Go package of the driver's type.
// None of them is imported: the type's package path is enough.
var driverDialects = map[string]Dialect{
	"github.com/jackc/pgx/v5/stdlib":       Postgres,
	"github.com/jackc/pgx/v4/stdlib":       Postgres,
	"github.com/lib/pq":                    Postgres,
	"github.com/go-sql-driver/mysql":       MySQL,
	"modernc.org/sqlite":                   SQLite,
	"github.com/mattn/go-sqlite3":          SQLite,
	"github.com/ncruces/go-sqlite3/driver": SQLite,
}

// DialectOf is the dialect of db's driver (db.Driver(), also for a DB from sql.OpenDB): pgx's
// stdlib or lib/pq is Postgres, go-sql-driver/mysql is MySQL, modernc.org/sqlite or
// mattn/go-sqlite3 is SQLite. Any other driver (a wrapping one too) is an error: name the
// dialect with FenceDialect.
func DialectOf(db *sql.DB) (Dialect, error) {
	if db == nil {
		return 0, fmt.Errorf("redislock: DialectOf(nil)")
	}
	drv := db.Driver()
	t := reflect.TypeOf(drv)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		if d, ok := driverDialects[t.PkgPath()]; ok {
			return d, nil
		}
	}
	return 0, fmt.Errorf("redislock: the SQL dialect of driver %T is not known: "+
		"name it with FenceDialect(redislock.Postgres), MySQL or SQLite", drv)
}

// fenceSQL is the fence statement of docs/fencing.md on table, and for MySQL the read back of
// the stored token (its affected-row counts cannot tell "newer token stored" from "this token
// stored already"). The arguments are the fence's name and token, then (readBack) the name.
func (d Dialect) fenceSQL(table string) (upsert, readBack string) {
	switch d {
	case Postgres:
		return "INSERT INTO " + table + " (name, token) VALUES ($1, $2)" +
			" ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token" +
			" WHERE " + table + ".token <= EXCLUDED.token", ""
	case SQLite:
		return "INSERT INTO " + table + " (name, token) VALUES (?, ?)" +
			" ON CONFLICT (name) DO UPDATE SET token = excluded.token" +
			" WHERE " + table + ".token <= excluded.token", ""
	case MySQL:
		return "INSERT INTO " + table + " (name, token) VALUES (?, ?)" +
				" ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))",
			"SELECT token FROM " + table + " WHERE name = ? FOR UPDATE"
	}
	return "", ""
}

// createSQL is the fence table's DDL of docs/fencing.md.
func (d Dialect) createSQL(table string) string {
	switch d {
	case Postgres:
		return "CREATE TABLE IF NOT EXISTS " + table + " (name text PRIMARY KEY, token bigint NOT NULL)"
	case SQLite:
		return "CREATE TABLE IF NOT EXISTS " + table + " (name TEXT PRIMARY KEY, token INTEGER NOT NULL)"
	case MySQL:
		return "CREATE TABLE IF NOT EXISTS " + table +
			" (name VARBINARY(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE = InnoDB"
	}
	return ""
}
