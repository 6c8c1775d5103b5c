package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// election.go: leader election on a lock (rules 21 and 22 of docs/clients.md). A candidate's
// campaign is a session hold taken in the key's FIFO queue and renewed by the Locker's
// watchdog; its term is the hold's fencing token. Observers follow the holder with LOCK.WATCH.

// DefaultLeaderTTL is the lease of a leadership without WithLeaderTTL: the watchdog renews it
// every third of it; a leader frozen or cut off is replaced at its end.
const DefaultLeaderTTL = 10 * time.Second

// ErrResigned is the cause (context.Cause) of a Leadership's context that Resign ended.
var ErrResigned = errors.New("redislock: leadership resigned")

// An Election is one candidate's view of the election on a key: it campaigns for
// leadership, and it tells who leads. Make one per candidate (each with an identity of its
// own: the identity is the owner of its hold, and two candidates with one identity would be
// one candidate to the server); its methods are safe for concurrent use.
type Election struct {
	locker   *Locker
	key      string
	identity string
	ttl      time.Duration
}

// An ElectionOption changes an Election (NewElection).
type ElectionOption func(*Election)

// WithLeaderTTL sets the lease of a leadership (default DefaultLeaderTTL): renewed by the
// watchdog while the leader lives; a leader frozen (SIGSTOP, GC, swap) or cut off is
// replaced when it ends. Under 1ms, Campaign answers ErrInvalidArgument.
func WithLeaderTTL(d time.Duration) ElectionOption {
	return func(e *Election) { e.ttl = d }
}

// NewElection is the election on key for the candidate identity (a host name, a pod name)
// through locker, whose watchdog renews the leader's lease.
func NewElection(locker *Locker, key, identity string, opts ...ElectionOption) *Election {
	e := &Election{locker: locker, key: key, identity: identity, ttl: DefaultLeaderTTL}
	for _, opt := range opts {
		opt(e)
	}
	return e
}

// Key is the election's lock.
func (e *Election) Key() string { return e.key }

// Identity is this candidate's identity.
func (e *Election) Identity() string { return e.identity }

// Campaign waits in the key's FIFO queue (LOCK.ACQUIRE key identity ttl SESSION WAIT) until
// this candidate leads, or ctx ends (without limit by default, as Obtain: the context bounds
// it; cancelling it leaves the queue). The leadership is a session hold on a connection of
// its own, renewed by the Locker's watchdog: a leader killed with kill -9 closes it and the
// next candidate leads at once; one frozen or cut off keeps it, and the lease's end hands
// over. Errors are Obtain's: ErrNotObtained (with ctx's error) when ctx ended the wait,
// ErrUnavailable when the server did not answer, ErrInvalidArgument for an empty identity or
// a lease under 1ms. Campaigning again after a loss is the caller's choice.
func (e *Election) Campaign(ctx context.Context) (*Leadership, error) {
	if e.identity == "" {
		return nil, invalid("an election's identity must not be empty")
	}
	lock, err := e.locker.Obtain(ctx, e.key, e.ttl, WithSession(), WithOwner(e.identity))
	if err != nil {
		return nil, err
	}
	lead := &Leadership{lock: lock}
	lead.ctx, lead.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	lock.whenLost(lead.cancel)
	return lead, nil
}

// A Leadership is a candidate's term as leader, from Campaign until Resign or its loss.
type Leadership struct {
	lock   *Lock
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Term is the leadership's fencing token: a later leader's term is always larger. Pass it
// with every write the leader makes (Guard, Fenced with Lock, a fenced store).
func (l *Leadership) Term() int64 { return l.lock.Token() }

// Identity is the leader's identity (the hold's owner).
func (l *Leadership) Identity() string { return l.lock.Owner() }

// Context is cancelled, once, when the leadership ends: lost (a renewal answered 0, the lease
// ran out, the session's connection closed: context.Cause is then Err, matching ErrLost) or
// resigned (context.Cause is ErrResigned). Run the leader's work under it. It carries the
// values of Campaign's context, not its deadline.
func (l *Leadership) Context() context.Context { return l.ctx }

// Err is nil while the leadership lives or after Resign ended it; once it is lost, an error
// matching ErrLost that says why (rule 8's reasons).
func (l *Leadership) Err() error { return l.lock.Err() }

// Lock is the leadership's hold: for Fenced, Fence, or the hold's own methods.
func (l *Leadership) Lock() *Lock { return l.lock }

// Guard runs one command only while this leadership is live (LOCK.GUARD key term command
// args...): see Lock.Guard. A leadership known lost or resigned is refused at once, ErrStale.
func (l *Leadership) Guard(ctx context.Context, args ...any) *redis.Cmd {
	return l.lock.Guard(ctx, args...)
}

// Resign ends the leadership (LOCK.RELEASE): the next candidate in the queue leads at once.
// The leadership's context is cancelled (cause ErrResigned, unless it was lost first). It
// answers nil when it ended a live leadership (or one resigned before); Err when the
// leadership had been lost (Resign found it gone included); an error matching ErrUnavailable
// when the server did not answer (its session's connection is closed all the same, which ends
// the hold where the server is up).
func (l *Leadership) Resign(ctx context.Context) error {
	_, err := l.lock.Release(ctx)
	l.cancel(ErrResigned)
	if err != nil {
		return err
	}
	return l.lock.Err()
}

// A Leader is who leads an election: the identity of the candidate and its term. The zero
// Leader is none (no leader).
type Leader struct {
	Identity string
	Term     int64
}

// None reports whether l is no leader (the election's lock is free).
func (l Leader) None() bool { return l.Term == 0 }

// leader is the newest live hold of a LOCK.WATCH reply as a Leader.
func (r watchReply) leader() Leader { return Leader{Identity: r.owner, Term: r.token} }

// Leader answers who leads now (one LOCK.WATCH key, through the client's pool): the leader,
// or the zero Leader when none does. When the server does not answer, the error matches
// ErrUnavailable (within the Locker's bound).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if e.locker.badOption != nil {
		return Leader{}, e.locker.badOption
	}
	reply, err := pooled(ctx, e.locker, e.key, func(ctx context.Context, c redis.UniversalClient) (watchReply, error) {
		return parseWatch(c.Do(ctx, watchArgs(e.key, "", -1)...))
	})
	return reply.leader(), err
}

// Observe is the election's leaders, on a channel closed when ctx ends: the current one (or
// none: the zero Leader) first, then each change, never the same leader twice in a row. It
// keeps one connection of its own blocked in LOCK.WATCH key AFTER cursor WAIT; after a broken
// link or a reply of rule 19 it connects again (through Sentinel: to the current master) and
// passes its last cursor, so the leader it reports next is the server's latest: it may skip
// leaders that came and went meanwhile, never the latest. A server that does not answer
// (frozen) is given up within half the Locker's bound plus a second, and asked again. Read
// the channel: while a leader waits to be read, no change is watched (the next one read is
// then the latest).
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	go e.observe(ctx, out)
	return out
}

// observe is Observe's goroutine.
func (e *Election) observe(ctx context.Context, out chan<- Leader) {
	defer close(out)
	if e.locker.badOption != nil {
		return
	}
	w := &watcher{l: e.locker, key: e.key}
	defer w.drop()
	var cursor string
	var last Leader
	reported := false
	for ctx.Err() == nil {
		reply, err := w.watch(ctx, cursor)
		switch {
		case errors.Is(err, redis.Nil):
			continue // nothing new within the WAIT: ask again
		case errors.Is(err, errUnsupported):
			return // not a client this package can make connections from
		case err != nil:
			_ = sleep(ctx, w.failed(ctx, err))
			continue
		}
		cursor = reply.cursor
		now := reply.leader()
		if reported && now == last {
			continue
		}
		select {
		case out <- now:
			last, reported = now, true
		case <-ctx.Done():
		}
	}
}

// A watcher is an observer's connection of its own to the master of its key.
type watcher struct {
	l    *Locker
	key  string
	conn *redis.Client // nil until connected, or after it broke
	addr string
}

// wait is how long one LOCK.WATCH waits (WAIT) before it is asked again: half the bound, so
// that a server that stopped answering is noticed within the bound (its reads time out a
// grace later).
func (w *watcher) wait() time.Duration { return max(w.l.bound/2, time.Millisecond) }

// watch sends one LOCK.WATCH (AFTER cursor, unless "": then it answers at once), connecting
// first when there is no connection; redis.Nil when nothing changed within the WAIT. The
// connection is closed when ctx ends, which ends the call.
func (w *watcher) watch(ctx context.Context, cursor string) (watchReply, error) {
	sent := time.Now()
	if w.conn == nil {
		base, err := w.l.node(ctx, w.key)
		if err != nil {
			return watchReply{}, err
		}
		dial, cancel := context.WithTimeout(ctx, w.l.bound)
		conn, err := w.l.connect(dial, base, w.wait()+w.l.grace(), false)
		cancel()
		if err != nil {
			w.l.note(base.Addr, err, sent)
			return watchReply{}, err
		}
		w.conn, w.addr = conn, base.Addr
	}
	wait := int64(-1)
	if cursor != "" {
		wait = millis(w.wait())
	}
	conn := w.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	reply, err := parseWatch(conn.Do(ctx, watchArgs(w.key, cursor, wait)...))
	if !stop() {
		w.conn = nil // closed by ctx's end
		return watchReply{}, ctx.Err()
	}
	w.l.note(w.addr, err, sent)
	return reply, err
}

// failed handles a failed watch: the connection is dropped unless err is an answer (an error
// reply of the server), and a cluster's map of slots reloaded after a reply of rule 19. It
// returns how long to pause before asking again.
func (w *watcher) failed(ctx context.Context, err error) time.Duration {
	if classify(err) == answer {
		return w.l.grace() // an error reply (WRONGTYPE, ...): asked again, slowly
	}
	w.drop()
	w.l.reconnect(context.WithoutCancel(ctx), err)
	return retryAfter(w.l.bound)
}

// drop closes the connection (the next watch makes a new one).
func (w *watcher) drop() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}
