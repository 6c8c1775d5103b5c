package redislock_test

// The cost of Fenced per write against the plain transaction (issue 30): the same
// read-modify-write, BEGIN; SELECT qty ... FOR UPDATE (a plain SELECT on SQLite); UPDATE;
// COMMIT, plain and through Fenced, which adds its fence statement (one on PostgreSQL and
// SQLite, two on MySQL) after BEGIN. One goroutine, one hold, on each database:
//
//	go test -run '^$' -bench 'Fenced|PlainTx' -benchtime 2000x

import (
	"database/sql"
	"testing"
	"time"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// readModifyWrite reads the stock of sku9 (locking its row where the database can) and
// writes it minus one, in tx.
func (s *shop) readModifyWrite(tx *sql.Tx) error {
	query := "SELECT qty FROM " + s.stock + " WHERE sku = 'sku9'"
	if s.db.Dialect != redislock.SQLite {
		query += " FOR UPDATE"
	}
	var qty int
	if err := tx.QueryRowContext(ctx, query).Scan(&qty); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.db.q("UPDATE "+s.stock+" SET qty = ? WHERE sku = 'sku9'"), qty-1)
	return err
}

// benchEachDB runs bench on each database with a shop and a hold of its lock.
func benchEachDB(b *testing.B, bench func(b *testing.B, s *shop, lock *redislock.Lock)) {
	for _, kind := range dbKinds {
		b.Run(kind, func(b *testing.B) {
			s := newShop(b, openDB(b, kind))
			lock := obtain(b, locker(b), s.key, 10*time.Minute, redislock.WithWatchdog(false))
			bench(b, s, lock)
		})
	}
}

func BenchmarkFenced(b *testing.B) {
	benchEachDB(b, func(b *testing.B, s *shop, lock *redislock.Lock) {
		for b.Loop() {
			if err := redislock.Fenced(ctx, s.db.DB, lock, s.readModifyWrite, s.opts()...); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPlainTx(b *testing.B) {
	benchEachDB(b, func(b *testing.B, s *shop, _ *redislock.Lock) {
		for b.Loop() {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.readModifyWrite(tx); err != nil {
				_ = tx.Rollback()
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
