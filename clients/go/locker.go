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
	client    redis.UniversalClient
	bound     time.Duration // the unavailability bound (WithUnavailableAfter)
	badOption error         // a LockerOption refused: every Obtain answers it

	renewals *renewer // the watchdog: one loop renewing every hold of the Locker

	mu     sync.Mutex
	idle   map[string][]*waitConn // connections whose last wait was answered, by node
	nodes  map[string]*health     // what is known of each node's answers, by address
	closed bool
}

// New returns a Locker on client. Short commands (a try without waiting, releases, extends,
// guarded writes) go through the client and its pool; waits, session holds and durable grants
// each use a connection of their own, made with the client's options, and the Locker's one
// renewal loop (the watchdog of all its holds) one per server (per master in a cluster),
// while it has holds to renew. A wait's
// connection is kept for the next wait once its reply has come (the server can then no longer
// grant to it); a wait that ends early closes it. Close closes the kept ones.
// WithUnavailableAfter sets how long a server may not answer before Obtain gives up on it.
func New(client redis.UniversalClient, opts ...LockerOption) *Locker {
	l := &Locker{client: client, bound: DefaultUnavailableAfter}
	l.renewals = newRenewer(l)
	for _, opt := range opts {
		opt(l)
	}
	return l
}

// How long a wait pauses before it asks again after a broken link.
const retryPause = 50 * time.Millisecond

// replyGrace is how long after a deadline a reply may still come (a wait's, the server's own
// WAIT timeout; a PING's, once the caller's context ended) before the server counts as
// silent: then unavailable, at most min(replyGrace, bound) after the deadline.
const replyGrace = time.Second

// grace is the Locker's replyGrace: never longer than its bound.
func (l *Locker) grace() time.Duration { return min(replyGrace, l.bound) }

// Obtain takes a hold on key for ttl, renewed by a watchdog until Release (see the Option
// functions for the other modes). It waits in the server's FIFO queue (LOCK.ACQUIRE ... WAIT)
// until ctx ends, or for WithWait's time; cancelling ctx leaves the queue. When the lock is not
// granted the error matches ErrNotObtained (and ctx's error, when ctx ended the wait). When the
// server does not answer (or not as Redis with the module) it matches ErrUnavailable: at once
// for WithWait(0), else once ctx ends or the Locker's unavailability bound passes, whichever
// is first. A broken link while waiting is asked again with the same owner, which the server
// answers as a retry (the same token if the first ask was granted). Arguments are checked
// before anything is sent (ErrInvalidArgument); other errors are the server's.
func (l *Locker) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if l.badOption != nil {
		return nil, l.badOption
	}
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
	tokens, conn, start, err := l.acquire(ctx, l.single(key, owner, ttl, &o), &o)
	if err != nil {
		return nil, err
	}
	token := tokens[0]
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
	return l.hold(key, owner, token, ttl, start, session, !o.noWatchdog), nil
}

// A grant is what acquire asks for: one key (LOCK.ACQUIRE) or a set (LOCK.MACQUIRE).
type grant struct {
	key      string                            // routes it: the key, a set's first key
	args     func(wait int64) []any            // the command; wait < 0: no WAIT, 0: without limit
	parse    func(*redis.Cmd) ([]int64, error) // the tokens, ErrNotObtained, ...
	giveBack func(context.Context, []int64)    // releases a grant the caller does not get
}

// single is the grant of one key.
func (l *Locker) single(key, owner string, ttl time.Duration, o *options) *grant {
	return &grant{
		key:  key,
		args: func(wait int64) []any { return o.acquireArgs(key, owner, ttl, wait) },
		parse: func(cmd *redis.Cmd) ([]int64, error) {
			token, err := parseToken(cmd)
			return []int64{token}, err
		},
		giveBack: func(ctx context.Context, tokens []int64) { l.giveBack(ctx, key, owner, tokens[0]) },
	}
}

// acquire sends g's command until it has an answer: the tokens, the connection it came on
// when it needed one of its own (a wait, a session, a durable grant), and when the lease began
// at the earliest the client can tell (the try's sending, or a wait's reply).
func (l *Locker) acquire(ctx context.Context, g *grant, o *options) ([]int64, *waitConn, time.Time, error) {
	waits := !o.waitSet || o.wait > 0
	if !waits && !o.session && o.replicas == 0 {
		return l.try(ctx, g)
	}
	deadline, bounded, byCtx := o.deadline(ctx)
	start := time.Now()
	var refused refusal
	for asked := false; ; asked = true {
		wait, limit := int64(-1), time.Time{}
		if waits {
			wait = 0 // no limit: the context ends it
			if bounded {
				left := time.Until(deadline)
				if left <= 0 && asked { // one ask is always sent, however short the wait
					return nil, nil, start, refused.or(func() error { return timedOut(ctx, byCtx) })
				}
				// Rounded up, at least 1 ms: the server's wait never ends before the deadline.
				wait, limit = millis(left), deadline.Add(l.grace())
			}
		}
		sent := time.Now()
		conn, base, err := l.waitConn(ctx, g.key, o.session)
		if err == nil {
			var tokens []int64
			tokens, err = l.ask(ctx, conn, g, g.args(wait), limit)
			if err == nil {
				return tokens, conn, leaseStart(sent, waits), nil
			}
			l.done(conn, err)
			switch {
			case errors.Is(err, ErrNotObtained) && waits && bounded && !errors.Is(err, ctx.Err()):
				// The server's WAIT timeout (ctx may end at the same moment).
				return nil, nil, start, timedOut(ctx, byCtx)
			case errors.Is(err, ErrNotObtained), errors.Is(err, ErrUnavailable):
				return nil, nil, start, refused.or(func() error { return err })
			}
		}
		if ctx.Err() != nil {
			return nil, nil, start, refused.or(func() error { return l.ended(ctx, base, start, err) })
		}
		retry := waits && (!bounded || time.Now().Before(deadline))
		refused.note(l, l.addr(base), err, sent)
		if err := l.unavailable(l.addr(base), err, sent, refused.since, retry); err != nil || !retry {
			return nil, nil, start, err
		}
		l.reconnect(ctx, err)
		if sleep(ctx, retryPause) != nil {
			return nil, nil, start, refused.or(func() error { return l.ended(ctx, base, start, err) })
		}
	}
}

// A refusal is the replies of rule 19 a wait has had in a row (the node cannot serve the key
// now): when they began, and the last as an *UnavailableError (nil: the last answer was not).
type refusal struct {
	since time.Time
	err   error
}

// note keeps err, an attempt's error (sent at sent, to addr), if it is a reply of rule 19.
func (r *refusal) note(l *Locker, addr string, err error, sent time.Time) {
	if classify(err) != notHere {
		*r = refusal{}
		return
	}
	if r.err == nil {
		r.since = sent
	}
	r.err = l.unavailableAt(addr, err)
}

// or is the error of a wait that reached its deadline: unavailable after a reply of rule 19,
// else otherwise's.
func (r *refusal) or(otherwise func() error) error {
	if r.err != nil {
		return r.err
	}
	return otherwise()
}

// leaseStart is when a lease granted to a command sent at sent began, at the earliest the
// client can tell: then for a try; for a wait, when the grant's reply came (the server
// granted it at most the reply's way earlier).
func leaseStart(sent time.Time, waits bool) time.Time {
	if waits {
		return time.Now()
	}
	return sent
}

// try sends g's command without WAIT through the client's pool, once: the try-once form is
// unavailable at its first failure.
func (l *Locker) try(ctx context.Context, g *grant) ([]int64, *waitConn, time.Time, error) {
	sent := time.Now()
	tokens, err := pooled(ctx, l, g.key, func(ctx context.Context, c redis.UniversalClient) ([]int64, error) {
		return g.parse(once(ctx, c, g.args(-1)...))
	})
	return tokens, nil, sent, err
}

// ended is the error of a wait (begun at start) that ctx ended after err: not obtained if the
// server has answered since start (or answers a PING now), else unavailable.
func (l *Locker) ended(ctx context.Context, base *redis.Options, start time.Time, err error) error {
	if base == nil {
		return l.unavailableAt(l.where(), err)
	}
	if err := l.silent(ctx, base, start, err); err != nil {
		return err
	}
	return notObtained(ctx)
}

// addr is the address of base, or of the service when base is not known.
func (l *Locker) addr(base *redis.Options) string {
	if base != nil {
		return base.Addr
	}
	return l.where()
}

// errNoAnswer: a wait's reply did not come by the wait's deadline (plus the grace): the link
// counts as broken.
var errNoAnswer = errors.New("redislock: no reply by the end of the wait")

// ask sends g's command (args) on conn, watched (see watched): if ctx ends first (or limit
// passes, when not zero, or the server stops answering), conn is closed, which takes it out of
// the server's queue; a grant whose reply was already on its way is given back.
func (l *Locker) ask(ctx context.Context, conn *waitConn, g *grant, args []any, limit time.Time) ([]int64, error) {
	start := time.Now()
	var tokens []int64
	err, cut := l.watched(ctx, conn, start, limit, func(ctx context.Context) (err error) {
		tokens, err = g.parse(conn.Do(ctx, args...))
		return err
	})
	if cut == nil {
		return tokens, err
	}
	if err == nil {
		g.giveBack(ctx, tokens)
	}
	return nil, l.cutShort(ctx, conn.base, start, cut)
}

// watched runs send, a command on conn that the server may hold (a wait, WAIT), while the
// server is watched (watchServer). cut is nil when send's reply came first; else conn was
// closed first (which ends send) and cut is why: ctx ended, limit passed (errNoAnswer, when
// limit is not zero), or the watch's *UnavailableError.
func (l *Locker) watched(ctx context.Context, conn *waitConn, start, limit time.Time, send func(context.Context) error) (err, cut error) {
	watch, end := context.WithCancelCause(ctx)
	defer end(nil)
	if !limit.IsZero() {
		var cancel context.CancelFunc
		watch, cancel = context.WithDeadlineCause(watch, limit, errNoAnswer)
		defer cancel()
	}
	defer l.watchServer(watch, conn.base, start, end)()
	closed := make(chan struct{})
	stop := context.AfterFunc(watch, func() {
		conn.close()
		close(closed)
	})
	err = send(ctx)
	if stop() {
		l.note(conn.base.Addr, err, start)
		return err, nil
	}
	<-closed
	if !isFailure(err) {
		l.health(conn.base.Addr).answered()
	}
	return err, context.Cause(watch)
}

// cutShort is the error of a command sent at start that was cut (see watched): cut itself
// while ctx lives; once ctx has ended, not obtained if the server has answered since start
// (or answers a PING now), else unavailable.
func (l *Locker) cutShort(ctx context.Context, base *redis.Options, start time.Time, cut error) error {
	if ctx.Err() == nil {
		return cut
	}
	if err := l.silent(ctx, base, start, nil); err != nil {
		return err
	}
	return notObtained(ctx)
}

// durable waits for o.replicas replicas to acknowledge the grant (WAIT on the connection that
// received it), watched like a wait (see watched): when fewer do in time the lock is not
// obtained; when the server does not answer it is unavailable within the bound. Either way the
// grant is given back (in the background when the server is silent: it ends within the bound).
func (l *Locker) durable(ctx context.Context, conn *waitConn, key, owner string, token int64, o *options) error {
	start := time.Now()
	var acked int64
	err, cut := l.watched(ctx, conn, start, time.Time{}, func(ctx context.Context) (err error) {
		acked, err = conn.Do(ctx, replicasArgs(o.replicas, o.replicasTimeout)...).Int64()
		return err
	})
	switch {
	case cut != nil:
		err = l.cutShort(ctx, conn.base, start, cut)
	case isFailure(err):
		err = l.unavailableAt(conn.base.Addr, err)
	case err == nil && acked >= int64(o.replicas):
		return nil
	case err == nil:
		err = fmt.Errorf("%w: %d of %d replicas had the grant after %v", ErrNotObtained,
			acked, o.replicas, o.replicasTimeout)
	}
	if errors.Is(err, ErrUnavailable) {
		go l.giveBack(ctx, key, owner, token)
	} else {
		l.giveBack(ctx, key, owner, token)
	}
	return err
}

// giveBack releases a grant the caller does not get, through the client's pool within the
// bound (whatever ctx says): at worst its lease ends by itself.
func (l *Locker) giveBack(ctx context.Context, key, owner string, token int64) {
	_, _ = l.release(context.WithoutCancel(ctx), key, owner, token)
}

// release sends LOCK.RELEASE once through the client's pool (see pooled): a release that was
// written may have run, so a broken link is not retried (a second one would answer 0, as if
// the lease had gone) but answered as unavailable.
func (l *Locker) release(ctx context.Context, key, owner string, token int64) (int64, error) {
	return pooled(ctx, l, key, func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		return once(ctx, c, releaseArgs(key, owner, token)...).Int64()
	})
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
