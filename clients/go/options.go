package redislock

import "time"

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
// it, Obtain waits until the context ends; WithWait(0) does not wait: one try. A negative d
// is an error matching ErrInvalidArgument.
func WithWait(d time.Duration) Option {
	return func(o *options) { o.wait, o.waitSet = d, true }
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

// WithWatchdog(false) keeps the lease fixed at ttl (Lock.Extend moves its end); by default the
// Locker's renewal loop renews it every ttl/3 until Release.
func WithWatchdog(on bool) Option {
	return func(o *options) { o.noWatchdog = !on }
}

func (o *options) check(ttl time.Duration) error {
	switch {
	case ttl < time.Millisecond:
		return invalid("ttl %v: must be at least 1ms", ttl)
	case o.wait < 0:
		return invalid("WithWait(%v): must not be negative (WithWait(0) tries once)", o.wait)
	case o.shared && o.limit != 0:
		return invalid("WithShared and WithPermits exclude each other")
	case o.limit != 0 && (o.permits < 1 || o.permits > o.limit):
		return invalid("WithPermits(%d, %d): need 1 <= n <= limit", o.limit, o.permits)
	case o.replicas < 0:
		return invalid("WithReplicas(%d, ...): n must not be negative", o.replicas)
	}
	return nil
}

// A LockerOption changes a Locker (New).
type LockerOption func(*Locker)

// DefaultUnavailableAfter is the unavailability bound of a Locker without
// WithUnavailableAfter.
const DefaultUnavailableAfter = 10 * time.Second

// WithUnavailableAfter sets the Locker's unavailability bound d (default 10s): when the
// server has not answered for d (refused, unresolvable, no reply, not Redis), Obtain (with
// any wait, without limit included) fails with an error matching ErrUnavailable instead of
// retrying on. A wait longer than d is watched by a PING every d/2 on another connection.
// d must be positive: Obtain answers ErrInvalidArgument otherwise.
func WithUnavailableAfter(d time.Duration) LockerOption {
	return func(l *Locker) {
		if d <= 0 {
			l.badOption = invalid("WithUnavailableAfter(%v): must be positive", d)
		}
		l.bound = d
	}
}
