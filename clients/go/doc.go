// Package redislock takes locks of the redis-lock server module (the LOCK.* commands) on
// go-redis v9: standalone servers, Sentinel (a FailoverClient) and Redis Cluster.
//
// The server does the hard parts: fair FIFO waits, fencing tokens, leases, shared locks,
// semaphores, session holds and guarded writes. This package writes the loop around them that
// applications otherwise write by hand: wait in the server's queue without polling (the
// context bounds the wait, and cancelling it leaves the queue), renew the lease while the work
// runs (one renewal loop per Locker, on one connection of its own per server), say when a hold is lost (Lock.Lost and Lock.Err), never renew a
// released hold, and carry the token to the write: Lock.Guard for data in Redis, Fenced for a
// transaction of a SQL database (database/sql: PostgreSQL, MySQL/MariaDB, SQLite), which
// raises the lock's fence as the transaction's first statement (docs/fencing.md).
//
//	locker := redislock.New(client)
//	lock, err := locker.Obtain(ctx, "{sku:9}:lock", 30*time.Second)
//	if err != nil {
//		return err // errors.Is(err, redislock.ErrNotObtained) when it was not granted,
//		// redislock.ErrUnavailable when the lock service did not answer (New's bound, 10s)
//	}
//	defer lock.Release(ctx)
//	left, err := lock.Guard(ctx, "DECRBY", "{sku:9}:stock", 1).Int64()
//
// Lock sets (Locker.ObtainAll) take several keys in one step or none (LOCK.MACQUIRE): a
// *MultiLock with a token per key, renewed by the same loop, lost as one when any member is.
//
// Elections (NewElection) build on the same holds: a candidate campaigns with a session hold
// renewed by the watchdog, its term is the token, and Observe follows the leaders with
// LOCK.WATCH.
//
// Every rule of docs/clients.md in the repository (owners, waits, retries, the watchdog, loss,
// release, modes, Sentinel) is written once here, and each has a test in this package.
package redislock
