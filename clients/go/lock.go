package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Lock is one granted hold: its fencing token, its guarded writes, its loss and its release.
// Its methods are safe for concurrent use. Release it once the work is done; a Lock that is
// never released is renewed by its watchdog for as long as the process runs.
type Lock struct {
	locker *Locker
	key    string
	owner  string
	token  int64
	// The connection a session hold lives on (closing it ends the hold), or nil.
	session *redis.Client

	// turn makes the watchdog's renewals and the release take turns: a renewal is sent only
	// while phase is held, and the release moves it away from held, so none follows it.
	turn sync.Mutex
	// mu guards phase, err and abandon (read without waiting for a renewal).
	mu      sync.Mutex
	phase   phase
	err     error              // why the hold was lost
	abandon context.CancelFunc // ends the renewal in flight at once (closes its connection)
	lost    chan struct{}      // closed once, when the hold is lost
	stop    chan struct{}      // closed by the release: the watchdog ends
	done    chan struct{}      // closed when the watchdog has ended (nil: no watchdog)
	fixed   *time.Timer        // loses a fixed lease (no watchdog) at its end (nil: a watchdog)
}

type phase int

const (
	held phase = iota
	released
	lost
)

// hold starts the Lock of a grant whose lease began at start, and its watchdog; a fixed lease
// (no watchdog) is lost at its end by a timer, after which release and guard answer at once.
func (l *Locker) hold(key, owner string, token int64, ttl time.Duration, start time.Time, session *redis.Client, watchdog bool) *Lock {
	lock := &Lock{
		locker:  l,
		key:     key,
		owner:   owner,
		token:   token,
		session: session,
		lost:    make(chan struct{}),
		stop:    make(chan struct{}),
	}
	if watchdog {
		lock.done = make(chan struct{})
		go lock.watch(ttl, start)
	} else {
		lock.fixed = time.AfterFunc(time.Until(start.Add(ttl)), func() {
			lock.lose("the lease ended (a fixed lease: no watchdog)", held)
		})
	}
	return lock
}

// Key is the lock's name.
func (l *Lock) Key() string { return l.key }

// Owner is the owner the hold was granted to.
func (l *Lock) Owner() string { return l.owner }

// Token is the hold's fencing token: it increases with every grant of the lock, so a store
// that keeps the highest token it has seen can refuse a late writer. Pass it with every write.
func (l *Lock) Token() int64 { return l.token }

// Lost is closed when the hold is lost: a renewal found the lease gone (it ran out, or the
// lock was force-released), the lease ended without a renewal getting through (the server
// could not be reached: lost at the lease's end), a fixed lease (WithWatchdog(false)) reached
// its end, the watchdog failed otherwise, or Release found the lease already gone. Err then
// says why.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err is nil while the hold lives and after a release that found it live; once the hold is
// lost (Release finding it gone included) it is an error that matches ErrLost and says why.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// lose marks the hold lost, once, if it is in phase from (held, or released by a release
// that found the lease gone).
func (l *Lock) lose(reason string, from phase) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.phase != from {
		return
	}
	l.phase, l.err = lost, fmt.Errorf("%w: %s: %s", ErrLost, l.key, reason)
	close(l.lost)
}

// live reports whether the hold is neither released nor lost.
func (l *Lock) live() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.phase == held
}

// Guard runs one command only while this is the live exclusive hold of the lock
// (LOCK.GUARD key token command args...), in one round trip: the server refuses it once the
// token is stale, and the returned command's error then matches ErrStale. It is sent once,
// never retried (it may have run). In a cluster, the command's keys must be in the lock's
// slot: use a hash tag ({sku:9}:lock, {sku:9}:stock).
func (l *Lock) Guard(ctx context.Context, args ...any) *redis.Cmd {
	all := append([]any{"LOCK.GUARD", l.key, l.token}, args...)
	cmd := redis.NewCmd(ctx, all...)
	l.mu.Lock()
	ph, why := l.phase, l.err
	l.mu.Unlock()
	switch ph {
	case lost:
		cmd.SetErr(fmt.Errorf("%w: %w", ErrStale, why))
		return cmd
	case released:
		cmd.SetErr(fmt.Errorf("%w: %s: the hold was released", ErrStale, l.key))
		return cmd
	}
	// Sent as a command of its own: it may still end in the background after the bound.
	sent, err := pooled(ctx, l.locker, l.key, func(ctx context.Context) (*redis.Cmd, error) {
		c := once(ctx, l.locker.short(), all...)
		return c, c.Err()
	})
	switch {
	case isAny(err, "STALE"):
		cmd.SetErr(&serverError{ErrStale, err})
	case err != nil:
		cmd.SetErr(err)
	default:
		cmd.SetVal(sent.Val())
	}
	return cmd
}

// Release ends the hold (LOCK.RELEASE key owner TOKEN token) and reports whether it was still
// live. A hold known lost or already released answers false at once, without the server. The
// watchdog stops in the same step, before the release is sent: no renewal follows it. A
// release that finds the lease already gone answers false and marks the hold lost (Lost is
// closed, Err matches ErrLost): the work done under it may have to be undone. A session
// hold's connection is closed. When the server does not answer, the error matches
// ErrUnavailable (and the hold is no longer renewed).
func (l *Lock) Release(ctx context.Context) (bool, error) {
	l.mu.Lock()
	was, abandon := l.phase, l.abandon
	if was == held {
		l.phase = released
		close(l.stop)
	}
	l.mu.Unlock()
	if was != held {
		return false, nil
	}
	// A renewal in flight is abandoned, not awaited (the server may be silent): its connection
	// closes, it fails at once and gives back the turn. No renewal starts after this (the
	// phase is no longer held); the watchdog's goroutine ends while the release is on its way.
	if abandon != nil {
		abandon()
	}
	if l.fixed != nil {
		l.fixed.Stop()
	}
	l.turn.Lock() // the renewal has ended: nothing it sends follows the release
	//lint:ignore SA2001 taking the turn is the wait
	l.turn.Unlock()
	n, err := l.locker.release(ctx, l.key, l.owner, l.token)
	if l.session != nil {
		_ = l.session.Close()
	}
	if l.done != nil {
		<-l.done
	}
	switch {
	case err != nil:
		return false, err
	case n == 0:
		l.lose("the lease ended before the release", released)
		return false, nil
	}
	return true, nil
}
