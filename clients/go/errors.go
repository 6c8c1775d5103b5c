package redislock

import (
	"errors"
	"fmt"
)

var (
	// ErrNotObtained: the lock was not granted. It was busy and the call did not wait, the
	// wait ended first (WithWait, or the context: then the error also matches the context's
	// error), or a durable grant did not reach its replicas (WithReplicas).
	ErrNotObtained = errors.New("redislock: not obtained")

	// ErrStale: Guard was refused, nothing ran. The token is no longer the live exclusive
	// hold's (the lease ran out, the lock was force-released or taken over), the hold is
	// shared or semaphore permits, or this Lock was released or lost. Fenced and Fence
	// return it when the fence table holds a newer token than the hold's: a newer holder
	// has been in (Fenced has rolled back, its function did not run).
	ErrStale = errors.New("redislock: stale token")

	// ErrLost: the hold ended before its release (Lock.Err wraps it with the reason).
	ErrLost = errors.New("redislock: hold lost")

	// ErrDeadlock: an exclusive hold was asked by an owner that holds the lock shared beside
	// other readers (two upgrading readers would wait for each other forever), or a set was
	// to wait (ObtainAll) by an owner that holds some of its keys while others are busy.
	ErrDeadlock = errors.New("redislock: deadlock")

	// ErrCrossSlot: the keys of a set (ObtainAll) hash to more than one slot of a cluster.
	// Give them one hash tag ({account}:1, {account}:2). It is not retried.
	ErrCrossSlot = errors.New("redislock: the keys of a set are in more than one cluster slot")

	// ErrUnavailable: the lock service could not be reached (refused, unresolvable, no answer
	// within the Locker's unavailability bound) or did not answer as Redis with the module
	// loaded. The error is an *UnavailableError, which names the address and the cause. Nothing
	// is known about the lock: refuse the work, or fall back knowingly.
	ErrUnavailable = errors.New("redislock: lock service unavailable")

	// ErrInvalidArgument: an argument was refused before anything was sent (a ttl under 1ms,
	// a negative wait, ...).
	ErrInvalidArgument = errors.New("redislock: invalid argument")
)

// An UnavailableError is the lock service not answering: at Addr, for Err (the last failure:
// a refused dial, a timeout, a reply that is not Redis's). It matches ErrUnavailable and Err.
type UnavailableError struct {
	Addr string
	Err  error
}

func (e *UnavailableError) Error() string {
	return "redislock: lock service unavailable at " + e.Addr + ": " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// invalid is an ErrInvalidArgument saying what was wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// serverError is an error reply of the server that one of the errors above stands for:
// errors.Is matches both the library's error and the reply (a redis.Error).
type serverError struct {
	kind  error
	reply error
}

func (e *serverError) Error() string { return e.kind.Error() + ": " + e.reply.Error() }

func (e *serverError) Unwrap() []error { return []error{e.kind, e.reply} }
