package redislock

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redis-lock/redis-lock/clients/go/internal/renewlag"
)

// sender.go: the renewal loop's connections. A sender sends the renewals the loop hands it
// on one connection: of its own to a node (made by the package outside the caller's pool,
// made again when it breaks: through Sentinel, to the current master), or a session hold's
// own. The renewals queued while a pipeline is on its way go together in the next one.

// A sender is one connection of the renewal loop and the goroutine that writes on it.
type sender struct {
	w       *renewer
	base    *redis.Options // the node, or nil for a session hold's connection
	conn    *redis.Client  // nil until connected (a node's), or after it broke
	mu      sync.Mutex
	pending []*renewal
	signal  chan struct{}
	ctx     context.Context // ends with stop: a pipeline on its way is cut
	stop    context.CancelFunc
}

// newSender is a sender to the node of base, or (base nil) on a session hold's connection.
func newSender(w *renewer, base *redis.Options, session *redis.Client) *sender {
	ctx, stop := context.WithCancel(context.Background())
	return &sender{w: w, base: base, conn: session, signal: make(chan struct{}, 1), ctx: ctx, stop: stop}
}

// queue adds renewals to the next pipeline.
func (s *sender) queue(batch []*renewal) {
	s.mu.Lock()
	s.pending = append(s.pending, batch...)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// run sends what is queued until stop; a node's connection is closed then.
func (s *sender) run() {
	defer func() {
		if s.base != nil && s.conn != nil {
			_ = s.conn.Close()
		}
	}()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.signal:
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		s.mu.Unlock()
		if len(batch) > 0 {
			s.send(batch)
		}
	}
}

// send renews batch in one pipeline, its replies awaited no longer than the earliest lease
// end among them (rule 15).
func (s *sender) send(batch []*renewal) {
	defer func() {
		if p := recover(); p != nil {
			s.w.fail(batch, reasonFailed+fmt.Sprint(p))
		}
	}()
	ctx, cancel := context.WithDeadline(s.ctx, s.w.earliestEnd(batch))
	defer cancel()
	if err := s.connect(ctx); err != nil {
		s.w.failed(batch, err)
		return
	}
	claimed, at := s.w.claim(batch)
	if len(claimed) == 0 {
		return
	}
	conn := s.conn
	pipe := conn.Pipeline()
	cmds := make([]*redis.Cmd, len(claimed))
	for i, c := range claimed {
		cmds[i] = pipe.Do(ctx, extendArgs(c.r.lock.key, c.r.lock.owner, c.ttl, c.r.lock.token)...)
	}
	// go-redis reads on past a cancel: closing the connection ends the read.
	closeOnEnd := context.AfterFunc(ctx, func() { _ = conn.Close() })
	_, err := pipe.Exec(ctx)
	cut := !closeOnEnd()
	arrived := time.Now()
	if s.base != nil {
		s.w.l.note(s.base.Addr, err, at)
	}
	losses, lags, broken := s.w.settle(claimed, cmds, at, arrived, cut, s.base == nil)
	lose(losses)
	for _, lag := range lags {
		renewlag.Report(lag)
	}
	if broken || cut || isFailure(err) {
		s.reconnect(ctx, err)
	}
	s.w.poke()
}

// connect makes the node's connection when there is none (its handshake done, so that the
// renewals claimed next are written at once).
func (s *sender) connect(ctx context.Context) error {
	if s.conn != nil {
		return nil
	}
	c, err := s.w.l.connect(ctx, s.base, s.w.l.bound, false)
	if err == nil {
		if err = c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
		}
	}
	if err != nil {
		return err
	}
	s.conn = c
	return nil
}

// reconnect drops a node's broken connection (the next pipeline makes a new one) and, in a
// cluster whose slots moved, reloads the map of slots.
func (s *sender) reconnect(ctx context.Context, err error) {
	if s.base == nil {
		return // a session hold's connection is the hold's: it is not made again
	}
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
	s.w.l.reconnect(context.WithoutCancel(ctx), err)
}

// earliestEnd is the earliest lease end in batch.
func (w *renewer) earliestEnd(batch []*renewal) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := batch[0].leaseEnd
	for _, r := range batch[1:] {
		if r.leaseEnd.Before(end) {
			end = r.leaseEnd
		}
	}
	return end
}

// claim takes from batch the renewals still in the loop, to be written now, with what they are
// sent with, and the sending time. A release after this finds its renewal already sent.
func (w *renewer) claim(batch []*renewal) ([]sent, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	claimed := make([]sent, 0, len(batch))
	for _, r := range batch {
		if !r.out {
			r.flight = make(chan struct{}) // an extend from now waits for its answer
			claimed = append(claimed, sent{r: r, ttl: r.ttl, gen: r.gen, due: r.due})
		}
	}
	return claimed, time.Now()
}

// fail loses the holds of batch: the watchdog failed (a panic while sending).
func (w *renewer) fail(batch []*renewal, reason string) {
	var losses []loss
	w.mu.Lock()
	for _, r := range batch {
		r.landed()
		if !r.out {
			w.takeOut(r)
			losses = append(losses, loss{r, reason})
		}
	}
	w.mu.Unlock()
	lose(losses)
	w.poke()
}

// A sent renewal: what it was sent with.
type sent struct {
	r   *renewal
	ttl time.Duration
	gen int
	due time.Time
}

// settle reads the replies of renewals sent at at (their pipeline's error err, ended by its
// context when cut): it updates the holds that are still in the loop and returns the losses,
// the lags of the successes, and whether the connection is to be made again.
func (w *renewer) settle(batch []sent, cmds []*redis.Cmd, at, arrived time.Time, cut bool, session bool) (losses []loss, lags []time.Duration, broken bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, s := range batch {
		r := s.r
		r.landed()
		if r.out {
			continue // released or lost meanwhile: its reply is ignored
		}
		r.queued = false
		n, err := cmds[i].Int64()
		switch {
		case err == nil && n == 1 && r.gen == s.gen:
			r.leaseEnd, r.due, r.failure = at.Add(s.ttl), at.Add(renewEvery(s.ttl)), nil
			lags = append(lags, arrived.Sub(s.due))
		case err == nil && n == 1:
			// Extend came meanwhile; this renewal may have run after it: the shorter lease
			// counts until the next renewal, sent now.
			if end := at.Add(s.ttl); end.Before(r.leaseEnd) {
				r.leaseEnd, r.due = end, arrived
			}
		case err == nil:
			w.takeOut(r)
			losses = append(losses, loss{r, reasonRanOut})
		case session && isFailure(err) && !cut:
			w.takeOut(r)
			losses = append(losses, loss{r, reasonSessionClosed + err.Error()})
		case cut || retryable(err):
			r.failure, r.due = err, arrived.Add(retryAfter(r.ttl))
			broken = true
		default:
			w.takeOut(r)
			losses = append(losses, loss{r, reasonRefused + err.Error()})
		}
		if !r.out {
			heap.Fix(&w.holds, r.index)
		}
	}
	return losses, lags, broken
}
