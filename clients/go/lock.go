package redislock

import (
	"context"
	"errors"
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

	// mu guards phase and err (read without waiting for a renewal).
	mu      sync.Mutex
	phase   phase
	err     error         // why the hold was lost
	lost    chan struct{} // closed once, when the hold is lost
	renewal *renewal      // the hold in the Locker's renewal loop (nil: a fixed lease)
	fixed   *time.Timer   // loses a fixed lease (no watchdog) at its end (nil: a watchdog)
	end     time.Time     // a fixed lease's end (Extend moves it)
	onLost  func(error)   // called once with err when the hold is lost (an election's), or nil
	extends turn          // its extends, one at a time
}

type phase int

const (
	held phase = iota
	released
	lost
)

// hold starts the Lock of a grant whose lease began at start, in the Locker's renewal loop
// (a session hold renewed on its own connection); a fixed lease (no watchdog) is lost at its
// end by a timer, after which release and guard answer at once.
func (l *Locker) hold(key, owner string, token int64, ttl time.Duration, start time.Time, session *redis.Client, watchdog bool) *Lock {
	lock := &Lock{
		locker:  l,
		key:     key,
		owner:   owner,
		token:   token,
		session: session,
		lost:    make(chan struct{}),
		extends: newTurn(),
	}
	if !watchdog {
		lock.end = start.Add(ttl)
		lock.fixed = time.AfterFunc(time.Until(lock.end), lock.fixedEnded)
		return lock
	}
	lock.renewal = &renewal{lock: lock, ttl: ttl, due: start.Add(renewEvery(ttl)), leaseEnd: start.Add(ttl)}
	if session != nil {
		lock.renewal.own = newSender(l.renewals, nil, session)
	}
	l.renewals.add(lock.renewal)
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
	l.loseLocked(reason, from)
}

// loseLocked is lose, under mu. A session hold's connection is closed: its hold is over.
func (l *Lock) loseLocked(reason string, from phase) {
	if l.phase != from {
		return
	}
	if l.session != nil {
		_ = l.session.Close()
	}
	l.phase, l.err = lost, fmt.Errorf("%w: %s: %s", ErrLost, l.key, reason)
	close(l.lost)
	if l.onLost != nil {
		l.onLost(l.err)
	}
}

// whenLost has f called once, with Err, when the hold is lost (at once if it is already);
// under mu, so f must not call the Lock's methods.
func (l *Lock) whenLost(f func(error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.phase == lost {
		f(l.err)
		return
	}
	l.onLost = f
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
	all := guardArgs(l.key, l.token, args)
	cmd := redis.NewCmd(ctx, all...)
	if err := l.known(); err != nil {
		cmd.SetErr(fmt.Errorf("%w: %w", ErrStale, err))
		return cmd
	}
	sent, err := pooled(ctx, l.locker, l.key, func(ctx context.Context, c redis.UniversalClient) (*redis.Cmd, error) {
		c2 := once(ctx, c, all...)
		return c2, c2.Err()
	})
	switch {
	case isAny(err, codeStale):
		cmd.SetErr(&serverError{ErrStale, err})
	case err != nil:
		cmd.SetErr(err)
	default:
		cmd.SetVal(sent.Val())
	}
	return cmd
}

// known is nil while the hold is live, else why not (lost: the loss; or released).
func (l *Lock) known() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.phase {
	case lost:
		return l.err
	case released:
		return fmt.Errorf("%s: the hold was released", l.key)
	}
	return nil
}

// Release ends the hold (LOCK.RELEASE key owner TOKEN token) and reports whether it was still
// live. A hold known lost or already released answers false at once, without the server. The
// hold leaves the renewal loop first, before the release is sent: no renewal of it follows
// (the reply of one already on its way is ignored; the other holds' renewals go on). A
// release that finds the lease already gone answers false and marks the hold lost (Lost is
// closed, Err matches ErrLost): the work done under it may have to be undone. A session
// hold's connection is closed. When the server does not answer, the error matches
// ErrUnavailable (and the hold is no longer renewed).
func (l *Lock) Release(ctx context.Context) (bool, error) {
	if !l.leave() {
		return false, nil
	}
	n, err := l.locker.release(ctx, l.key, l.owner, l.token)
	if l.session != nil {
		_ = l.session.Close()
	}
	switch {
	case err != nil:
		return false, err
	case n == 0:
		l.lose(reasonGoneAtRelease, released)
		return false, nil
	}
	return true, nil
}

// Extend renews the lease now (LOCK.EXTEND key owner ttl TOKEN token): it ends ttl from now,
// longer or shorter than before, and the watchdog, if on, renews by ttl from then on; a fixed
// lease (WithWatchdog(false)) is kept this way, on the caller's schedule. It answers true
// while the hold is live; false when the server answers 0 (the hold is then lost, "the lease
// ran out before it was renewed"), and false at once, without the server, for a hold known
// lost or already released. A ttl under 1ms is ErrInvalidArgument; when the server does not
// answer, the error matches ErrUnavailable: the extend may have run, so the client counts the
// lease as ending no later than ttl from when it was sent (rule 15), and the watchdog, if on,
// renews by ttl, at once when that is sooner than the lease was counted to end; a fixed lease
// is lost then unless extended. The extends of one Lock go one at a time, in the order they
// were called: one called while another is on its way is sent once that one is answered (or
// has failed); and a renewal of the hold already on its way (with the old ttl) is answered
// before the extend is sent (rule 20). When they are not within the bound, nothing is sent and
// the extend is unavailable.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, invalid("ttl %v: must be at least 1ms", ttl)
	}
	if !l.live() {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.locker.bound) // the waits and the extend: one bound
	defer cancel()
	giveBack, err := l.locker.awaitTurn(ctx, l.key, l.extends)
	if err != nil {
		return false, err
	}
	defer giveBack()
	if !l.live() { // lost or released while it waited
		return false, nil
	}
	if err := l.locker.landFirst(ctx, l.key, l.extending(ttl)); err != nil {
		return false, err
	}
	sent := time.Now()
	n, err := pooled(ctx, l.locker, l.key, func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		return once(ctx, c, extendArgs(l.key, l.owner, ttl, l.token)...).Int64()
	})
	if err != nil {
		l.extendFailed(err, sent, ttl)
		return false, err
	}
	return l.extended(n, sent, ttl), nil
}

// extendFailed takes an extend (sent at sent, for ttl) that failed with err. Unavailable, it
// may have run all the same and shortened the lease to end ttl from then: the client's
// deadline must not be later than that (rule 15).
func (l *Lock) extendFailed(err error, sent time.Time, ttl time.Duration) {
	if !errors.Is(err, ErrUnavailable) {
		return // answered: the server did not run it
	}
	if l.renewal != nil {
		l.locker.renewals.endNoLaterThan(l.renewal, sent.Add(ttl), err)
		return
	}
	l.endFixedNoLaterThan(sent.Add(ttl))
}

// extending tells the watchdog, before an extend is sent, that it renews by ttl from now on;
// it returns what closes when a renewal already on its way is answered (nil: none).
func (l *Lock) extending(ttl time.Duration) <-chan struct{} {
	if l.renewal == nil {
		return nil
	}
	return l.locker.renewals.extending(l.renewal, ttl)
}

// A turn is held by the one extend of a hold (a Lock, a MultiLock) on its way: the extends
// of a hold go one at a time, in the order they were called (rule 20). Sent together on two
// connections, a later extend could run after an earlier one and be answered first, and the
// earlier one's late answer would then set a lease end later than the server's (rule 15).
type turn chan struct{}

func newTurn() turn { return make(turn, 1) }

// awaitTurn waits, within ctx, for the extends of the hold (t) called before this one to be
// answered or to have failed, and returns what gives the turn back, to be called on every path
// once this extend is done. When they are not done in time, nothing is sent and the extend is
// unavailable. (Goroutines blocked on a channel go in the order they came: so do the extends.)
func (l *Locker) awaitTurn(ctx context.Context, key string, t turn) (giveBack func(), err error) {
	giveBack = func() { <-t }
	select {
	case t <- struct{}{}:
		return giveBack, nil
	default:
	}
	started := time.Now()
	select {
	case t <- struct{}{}:
		return giveBack, nil
	case <-ctx.Done():
		return nil, l.unavailableFor(ctx, key, fmt.Errorf("an extend of the hold called before this one got no answer within %v: %w",
			time.Since(started).Round(time.Millisecond), ctx.Err()))
	}
}

// landFirst waits, within ctx, for the renewals on their way when an extend of key was called
// (see renewer.extending) to be answered: the extend is sent after them (rule 20). When one is
// not, nothing is sent and the extend is unavailable.
func (l *Locker) landFirst(ctx context.Context, key string, flights ...<-chan struct{}) error {
	started := time.Now()
	for _, flight := range flights {
		if flight == nil {
			continue
		}
		select {
		case <-flight:
		case <-ctx.Done():
			return l.unavailableFor(ctx, key, fmt.Errorf("a renewal sent before the extend got no answer within %v: %w",
				time.Since(started).Round(time.Millisecond), ctx.Err()))
		}
	}
	return nil
}

// unavailableFor is the *UnavailableError of key's node for cause: an extend that waited in
// vain (ctx ended), with nothing sent.
func (l *Locker) unavailableFor(ctx context.Context, key string, cause error) error {
	base, _ := l.node(context.WithoutCancel(ctx), key)
	return l.unavailableAt(l.addr(base), cause)
}

// extended takes an extend's answer n (sent at sent, for ttl): 1 moves the lease's end (the
// watchdog renews by ttl from then on); 0 loses the hold. It reports whether the hold is live.
func (l *Lock) extended(n int64, sent time.Time, ttl time.Duration) bool {
	if n == 0 {
		if l.renewal != nil {
			l.locker.renewals.remove(l.renewal)
		}
		l.lose(reasonRanOut, held)
		return false
	}
	if l.renewal != nil {
		l.locker.renewals.extended(l.renewal, sent, ttl)
	}
	return l.extendFixed(sent.Add(ttl))
}

// leave marks the hold released and takes it out of the renewal loop (a fixed lease's timer
// stopped): no renewal of it is sent after that. False when it was not live.
func (l *Lock) leave() bool {
	l.mu.Lock()
	was := l.phase
	if was == held {
		l.phase = released
	}
	l.mu.Unlock()
	if was != held {
		return false
	}
	if l.renewal != nil {
		l.locker.renewals.remove(l.renewal)
	}
	if l.fixed != nil {
		l.fixed.Stop()
	}
	return true
}

// extendFixed moves a fixed lease's end to end; false when the hold is no longer live.
func (l *Lock) extendFixed(end time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.phase != held {
		return false
	}
	if l.fixed != nil {
		l.end = end
		l.fixed.Reset(time.Until(end))
	}
	return true
}

// endFixedNoLaterThan moves a fixed lease's end to end when that is sooner: its timer then
// loses the hold at end.
func (l *Lock) endFixedNoLaterThan(end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.phase == held && l.fixed != nil && end.Before(l.end) {
		l.end = end
		l.fixed.Reset(time.Until(end))
	}
}

// fixedEnded is the fixed lease's timer: the hold is lost unless Extend moved its end.
func (l *Lock) fixedEnded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.end) {
		return // moved meanwhile: the timer was set again
	}
	l.loseLocked(reasonFixedEnded, held)
}
