package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Locker takes locks through one go-redis client: a *redis.Client (a standalone server, or
// redis.NewFailoverClient for Sentinel) or a *redis.ClusterClient. It holds the client and
// the connections it keeps for waits, nothing global: make one per client, share it between
// goroutines, Close it when done.
type Locker struct {
	client redis.UniversalClient

	mu     sync.Mutex
	idle   map[string][]*waitConn // connections whose last wait was answered, by node
	closed bool
}

// New returns a Locker on client. Short commands (a try without waiting, releases, guarded
// writes) go through the client and its pool; waits, session holds, durable grants and
// watchdogs each use a connection of their own, made with the client's options. A wait's
// connection is kept for the next wait once its reply has come (the server can then no longer
// grant to it); a wait that ends early closes it. Close closes the kept ones.
func New(client redis.UniversalClient) *Locker {
	return &Locker{client: client}
}

// How long a wait pauses before it asks again after a broken link.
const retryPause = 50 * time.Millisecond

// How much longer than the server's own WAIT timeout a waiting read may take before the link
// counts as broken.
const readGrace = 2 * time.Second

// Obtain takes a hold on key for ttl, renewed by a watchdog until Release (see the Option
// functions for the other modes). It waits in the server's FIFO queue (LOCK.ACQUIRE ... WAIT)
// until ctx ends, or for WithWait's time; cancelling ctx leaves the queue. When the lock is not
// granted the error matches ErrNotObtained (and ctx's error, when ctx ended the wait); other
// errors are the server's or the network's. A broken link while waiting is asked again with the
// same owner, which the server answers as a retry (the same token if the first ask was granted).
func (l *Locker) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.check(ttl); err != nil {
		return nil, err
	}
	owner := o.owner
	if owner == "" {
		owner = newOwner()
	}
	token, conn, err := l.acquire(ctx, key, owner, ttl, &o)
	if err != nil {
		return nil, err
	}
	if o.replicas > 0 {
		err := l.durable(ctx, conn, key, owner, token, &o)
		if err != nil {
			l.done(conn, err)
			return nil, err
		}
	}
	var session *redis.Client
	if o.session {
		session = conn.Client
	} else if conn != nil {
		l.done(conn, nil)
	}
	return l.hold(key, owner, token, ttl, session, !o.noWatchdog), nil
}

// acquire sends LOCK.ACQUIRE until it has an answer: the token, and the connection it came on
// when it needed one of its own (a wait, a session, a durable grant).
func (l *Locker) acquire(ctx context.Context, key, owner string, ttl time.Duration, o *options) (int64, *waitConn, error) {
	waits := !o.waitSet || o.wait > 0
	if !waits && !o.session && o.replicas == 0 {
		token, err := parseToken(l.client.Do(ctx, o.args(key, owner, ttl, -1)...))
		return token, nil, err
	}
	deadline, bounded, byCtx := o.deadline(ctx)
	for {
		wait, limit := int64(-1), time.Time{}
		if waits {
			wait = 0 // no limit: the context ends it
			if bounded {
				left := time.Until(deadline)
				if left <= 0 {
					return 0, nil, timedOut(ctx, byCtx)
				}
				// Rounded up: the server's wait never ends before the deadline.
				wait, limit = (left + time.Millisecond - 1).Milliseconds(), deadline.Add(readGrace)
			}
		}
		conn, err := l.waitConn(ctx, key, o.session)
		if err == nil {
			var token int64
			token, err = l.ask(ctx, conn, key, owner, o.args(key, owner, ttl, wait), limit)
			if err == nil {
				return token, conn, nil
			}
			l.done(conn, err)
			if errors.Is(err, ErrNotObtained) {
				if ctx.Err() == nil && waits && bounded {
					return 0, nil, timedOut(ctx, byCtx)
				}
				return 0, nil, err
			}
		}
		if ctx.Err() != nil {
			return 0, nil, notObtained(ctx)
		}
		if !waits || !retryable(err) {
			return 0, nil, err
		}
		if bounded && !time.Now().Before(deadline) {
			return 0, nil, fmt.Errorf("redislock: %s: no server answered before the wait ended: %w", key, err)
		}
		l.reconnect(ctx, err)
		if sleep(ctx, retryPause) != nil {
			return 0, nil, notObtained(ctx)
		}
	}
}

// errNoAnswer: a wait's reply did not come by the wait's deadline (plus readGrace): the link
// counts as broken.
var errNoAnswer = errors.New("redislock: no reply by the end of the wait")

// ask sends one LOCK.ACQUIRE on conn. If ctx ends first (or limit passes, when not zero),
// conn is closed, which takes it out of the server's queue; a grant whose reply was already
// on its way is released again.
func (l *Locker) ask(ctx context.Context, conn *waitConn, key, owner string, args []any, limit time.Time) (int64, error) {
	watch := ctx
	if !limit.IsZero() {
		var cancel context.CancelFunc
		watch, cancel = context.WithDeadline(ctx, limit)
		defer cancel()
	}
	closed := make(chan struct{})
	stop := context.AfterFunc(watch, func() {
		conn.close()
		close(closed)
	})
	token, err := parseToken(conn.Do(ctx, args...))
	if stop() {
		return token, err
	}
	<-closed
	if err == nil {
		release := context.WithoutCancel(ctx)
		_ = l.client.Do(release, "LOCK.RELEASE", key, owner, "TOKEN", token).Err()
	}
	if ctx.Err() == nil {
		return 0, errNoAnswer
	}
	return 0, notObtained(ctx)
}

// durable waits for o.replicas replicas to acknowledge the grant (WAIT on the connection that
// received it); when fewer do in time, the hold is released and the lock not obtained.
func (l *Locker) durable(ctx context.Context, conn *waitConn, key, owner string, token int64, o *options) error {
	acked, err := conn.Wait(ctx, o.replicas, o.replicasTimeout).Result()
	if err == nil && acked >= int64(o.replicas) {
		return nil
	}
	_ = conn.Do(context.WithoutCancel(ctx), "LOCK.RELEASE", key, owner, "TOKEN", token).Err()
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: %d of %d replicas had the grant after %v", ErrNotObtained,
		acked, o.replicas, o.replicasTimeout)
}

// deadline is when the wait ends (WithWait's time or ctx's deadline, the earlier), whether
// there is one, and whether it is ctx's.
func (o *options) deadline(ctx context.Context) (at time.Time, bounded, byCtx bool) {
	at, bounded = ctx.Deadline()
	byCtx = bounded
	if o.waitSet {
		if mine := time.Now().Add(o.wait); !bounded || mine.Before(at) {
			at, bounded, byCtx = mine, true, false
		}
	}
	return at, bounded, byCtx
}

// timedOut is the error of a wait that reached its deadline. When the deadline is ctx's, it
// returns once ctx has ended too (the server's clock may end a wait a little earlier, and
// ctx's own timer fires a little after its deadline), so a caller looping until ctx ends does
// not spin and always sees ctx.Err() set.
func timedOut(ctx context.Context, byCtx bool) error {
	if !byCtx {
		return ErrNotObtained
	}
	<-ctx.Done() // its deadline is this one: it ends by itself
	return notObtained(ctx)
}

// notObtained is the error of a wait that ctx ended.
func notObtained(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrNotObtained, ctx.Err())
}

// parseToken reads LOCK.ACQUIRE's reply: the fencing token, or nil when not granted.
func parseToken(cmd *redis.Cmd) (int64, error) {
	v, err := cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, ErrNotObtained
	case isAny(err, "DEADLOCK"):
		return 0, &serverError{ErrDeadlock, err}
	case err != nil:
		return 0, err
	}
	token, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redislock: LOCK.ACQUIRE answered %v (%T), not a token", v, v)
	}
	return token, nil
}

// sleep pauses for d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newOwner is a random (version 4) UUID.
func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
