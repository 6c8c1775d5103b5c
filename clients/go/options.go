package redislock

import (
	"errors"
	"fmt"
	"time"
)

// An Option changes how Obtain takes a lock.
type Option func(*options)

type options struct {
	wait            time.Duration
	waitSet         bool
	shared          bool
	limit, permits  int
	session         bool
	replicas        int
	replicasTimeout time.Duration
	owner           string
	noWatchdog      bool
}

// WithWait bounds the wait in the server's queue to d (the context bounds it too). Without
// it, Obtain waits until the context ends; WithWait(0) does not wait: one try.
func WithWait(d time.Duration) Option {
	return func(o *options) { o.wait, o.waitSet = max(d, 0), true }
}

// WithShared takes a read hold: any number of readers at once, a writer waits for all.
func WithShared() Option {
	return func(o *options) { o.shared = true }
}

// WithPermits takes n permits of a counting semaphore of limit permits (LIMIT limit
// PERMITS n): holds fit while the permits held stay within limit.
func WithPermits(limit, n int) Option {
	return func(o *options) { o.limit, o.permits = limit, n }
}

// WithSession binds the hold to a connection of its own: when it closes (Release, or this
// process dies), the server releases the hold at once instead of at the end of its lease.
func WithSession() Option {
	return func(o *options) { o.session = true }
}

// WithReplicas makes a durable grant: after the grant Obtain sends WAIT n timeout, and when
// fewer than n replicas acknowledge in time it releases the hold and returns ErrNotObtained.
// A durable hold survives a failover to one of those replicas.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *options) { o.replicas, o.replicasTimeout = n, timeout }
}

// WithOwner sets the owner (default: a fresh random UUID per Obtain). Two holds with the same
// owner are the same hold to the server: a retry.
func WithOwner(owner string) Option {
	return func(o *options) { o.owner = owner }
}

// WithWatchdog(false) keeps the lease fixed at ttl; by default a watchdog goroutine renews it
// every ttl/3 until Release.
func WithWatchdog(on bool) Option {
	return func(o *options) { o.noWatchdog = !on }
}

func (o *options) check(ttl time.Duration) error {
	switch {
	case ttl < time.Millisecond:
		return fmt.Errorf("redislock: ttl %v: must be at least 1ms", ttl)
	case o.shared && o.limit != 0:
		return errors.New("redislock: WithShared and WithPermits exclude each other")
	case o.limit != 0 && (o.permits < 1 || o.permits > o.limit):
		return fmt.Errorf("redislock: WithPermits(%d, %d): need 1 <= n <= limit", o.limit, o.permits)
	case o.replicas < 0:
		return fmt.Errorf("redislock: WithReplicas(%d, ...): n must not be negative", o.replicas)
	}
	return nil
}

// millis is d in whole milliseconds, at least 1.
func millis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

// args is the LOCK.ACQUIRE command; wait < 0 sends no WAIT (one try), 0 waits without limit.
func (o *options) args(key, owner string, ttl time.Duration, wait int64) []any {
	args := []any{"LOCK.ACQUIRE", key, owner, millis(ttl)}
	if o.shared {
		args = append(args, "SHARED")
	}
	if o.limit != 0 {
		args = append(args, "LIMIT", o.limit, "PERMITS", o.permits)
	}
	if o.session {
		args = append(args, "SESSION")
	}
	if wait >= 0 {
		args = append(args, "WAIT", wait)
	}
	return args
}
