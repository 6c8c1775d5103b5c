package redislock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// The lock and its data share a hash tag ({sku:9}), so the guarded write works in a cluster too.
// (addr is the test server's address; the main README shows the lines from locker to Release.)
func Example() {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()
	client.Set(ctx, "{sku:9}:stock", 100, 0)

	locker := redislock.New(client)
	lock, err := locker.Obtain(ctx, "{sku:9}:lock", 30*time.Second) // waits in the server's FIFO queue
	if err != nil {
		log.Fatal(err) // errors.Is(err, redislock.ErrNotObtained) when not granted
	}
	left, err := lock.Guard(ctx, "DECRBY", "{sku:9}:stock", 1).Int64() // refused once the hold is gone
	if err != nil {
		log.Fatal(err)
	}
	held, err := lock.Release(ctx) // false if the hold had been lost meanwhile
	fmt.Println(left, held, err)
	// Output: 99 true <nil>
}

// A read-modify-write in PostgreSQL that a paused holder cannot spoil: the fence first, then
// the read and the write, in one transaction (docs/fencing.md). (databaseURL is a throwaway
// PostgreSQL's; the README shows the lines from sql.Open to CreateFenceTable, and from
// Obtain to the end.)
func ExampleFenced() {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()
	databaseURL := testDatabaseURL("postgres")

	db, err := sql.Open("pgx", databaseURL) // import _ "github.com/jackc/pgx/v5/stdlib"
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// Once: CREATE TABLE IF NOT EXISTS lock_fences (name text PRIMARY KEY, token bigint NOT NULL)
	if err := redislock.CreateFenceTable(ctx, db); err != nil {
		log.Fatal(err)
	}

	_, err = db.ExecContext(ctx, "DROP TABLE IF EXISTS stock; CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL);"+
		"INSERT INTO stock VALUES ('sku9', 100)")
	if err != nil {
		log.Fatal(err)
	}

	lock, err := redislock.New(client).Obtain(ctx, "{sku:9}:lock", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	var left int
	err = redislock.Fenced(ctx, db, lock, func(tx *sql.Tx) error {
		// The fence is raised: read, decide and write with plain statements.
		if err := tx.QueryRowContext(ctx, "SELECT qty FROM stock WHERE sku = $1", "sku9").Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return errors.New("sold out") // rolled back, returned as is
		}
		left--
		_, err := tx.ExecContext(ctx, "UPDATE stock SET qty = $1 WHERE sku = $2", left, "sku9")
		return err
	})
	if errors.Is(err, redislock.ErrStale) {
		log.Print(err) // a newer holder has been in: rolled back before the function ran
	}
	fmt.Println(left, err)
	// Output: 99 <nil>
}

// A wait is bounded by WithWait or by the context; WithWait(0) tries once.
func ExampleLocker_Obtain_wait() {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()
	locker := redislock.New(client)
	first, _ := locker.Obtain(ctx, "job", 10*time.Second)

	_, err := locker.Obtain(ctx, "job", 10*time.Second, redislock.WithWait(0))
	fmt.Println(errors.Is(err, redislock.ErrNotObtained))

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = locker.Obtain(short, "job", 10*time.Second) // leaves the queue when short ends
	fmt.Println(errors.Is(err, redislock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))

	_, _ = first.Release(ctx)
	// Output:
	// true
	// true true
}

// A transfer takes both accounts' locks in one step, or none (LOCK.MACQUIRE): two transfers
// naming them in opposite orders never deadlock. Each guarded write names its key and goes
// with that key's token. (The Go client's README shows the lines from locker to Release.)
func ExampleLocker_ObtainAll() {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()
	client.Set(ctx, "{bank}:acct:1", 100, 0)

	locker := redislock.New(client)
	keys := []string{"{bank}:lock:1", "{bank}:lock:2"} // one hash tag: one slot in a cluster
	set, err := locker.ObtainAll(ctx, keys, 30*time.Second)
	if err != nil {
		log.Fatal(err) // errors.Is(err, redislock.ErrNotObtained) when not granted
	}
	from, err := set.Guard(ctx, "{bank}:lock:1", "DECRBY", "{bank}:acct:1", 10).Int64()
	if err != nil {
		log.Fatal(err) // errors.Is(err, redislock.ErrStale) once that key's hold is gone
	}
	to, err := set.Guard(ctx, "{bank}:lock:2", "INCRBY", "{bank}:acct:2", 10).Int64()
	if err != nil {
		log.Fatal(err)
	}
	held, err := set.Release(ctx) // true only if every member was still held
	fmt.Println(from, to, held, err)
	// Output: 90 10 true <nil>
}

// Lost is closed when the hold ends before its release; Err says why. Here an operator
// force-releases the lock, and the watchdog's next renewal (ttl/3 later at most) finds out.
func ExampleLock_Lost() {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()
	lock, err := redislock.New(client).Obtain(ctx, "report", 3*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	client.Do(ctx, "LOCK.FORCERELEASE", "report")

	select {
	case <-lock.Lost():
		fmt.Println(lock.Err()) // roll the work back
	case <-time.After(5 * time.Second):
		fmt.Println("still held")
	}
	held, _ := lock.Release(ctx)
	fmt.Println(held)
	// Output:
	// redislock: hold lost: report: the lease ran out before it was renewed
	// false
}

// Read-write locks: readers share, a writer waits for all of them.
func ExampleWithShared() {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()
	locker := redislock.New(client)
	a, _ := locker.Obtain(ctx, "doc:7", 10*time.Second, redislock.WithShared())
	b, _ := locker.Obtain(ctx, "doc:7", 10*time.Second, redislock.WithShared())
	_, err := locker.Obtain(ctx, "doc:7", 10*time.Second, redislock.WithWait(0))
	fmt.Println(a.Token() != b.Token(), errors.Is(err, redislock.ErrNotObtained))
	_, _ = a.Release(ctx)
	_, _ = b.Release(ctx)
	// Output: true true
}

// A counting semaphore: at most 3 permits held at once, each with a lease of its own.
func ExampleWithPermits() {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()
	locker := redislock.New(client)
	two, _ := locker.Obtain(ctx, "gpu", time.Minute, redislock.WithPermits(3, 2))
	one, _ := locker.Obtain(ctx, "gpu", time.Minute, redislock.WithPermits(3, 1))
	_, err := locker.Obtain(ctx, "gpu", time.Minute, redislock.WithPermits(3, 1), redislock.WithWait(0))
	fmt.Println(errors.Is(err, redislock.ErrNotObtained))
	_, _ = two.Release(ctx)
	_, _ = one.Release(ctx)
	// Output: true
}

// An election: each candidate campaigns with an identity of its own; the leader's term fences
// its writes; Observe follows the leaders. (The README shows the lines from locker to the
// end.)
func ExampleElection() {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()

	locker := redislock.New(client)
	election := redislock.NewElection(locker, "{billing}:leader", "node-1")
	leadership, err := election.Campaign(ctx) // waits in the queue until this candidate leads
	if err != nil {
		log.Fatal(err)
	}
	// Cancelled once the leadership is lost (or resigned): run the leader's work under it.
	work := leadership.Context()
	err = leadership.Guard(work, "SET", "{billing}:owner", "node-1").Err() // refused after a newer term
	fmt.Println(leadership.Term() > 0, err)

	watch, stop := context.WithCancel(ctx)
	defer stop()
	leaders := election.Observe(watch) // the current leader first, then each change
	fmt.Println((<-leaders).Identity)
	_ = leadership.Resign(ctx) // the next candidate in the queue leads at once
	fmt.Println((<-leaders).None(), context.Cause(work))
	// Output:
	// true <nil>
	// node-1
	// true redislock: leadership resigned
}

// Sentinel: every connection the Locker makes asks the Sentinels for the current master.
func ExampleNew_sentinel() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
	})
	locker := redislock.New(client)
	// WithReplicas: granted only once a replica has the grant, so it survives a failover.
	lock, err := locker.Obtain(context.Background(), "order:42", 30*time.Second,
		redislock.WithReplicas(1, time.Second))
	_, _ = lock, err
}

// Cluster: each lock goes to the master of its key's slot.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"},
	})
	locker := redislock.New(client)
	lock, err := locker.Obtain(context.Background(), "{order:42}:lock", 30*time.Second)
	_, _ = lock, err
}
