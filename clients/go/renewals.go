package redislock

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// renewals.go: the watchdog, one loop per Locker (rule 6 of docs/clients.md). One goroutine
// keeps every live hold's next renewal and lease end in a heap: it hands the renewals that
// fall due to the sender of their node (sender.go: one connection of its own per node,
// renewals pipelined), and loses a hold whose lease end passes with no renewal through
// (rule 15). It runs while the Locker has holds to renew, and ends (closing its
// connections) when the last one leaves.

// A renewal is one hold as the loop renews it. Its fields are guarded by the renewer's mu.
type renewal struct {
	lock     *Lock
	ttl      time.Duration // sent with each renewal (Extend changes it)
	due      time.Time     // the next renewal: the last success's sending + ttl/3
	leaseEnd time.Time     // the lease's end as the client knows it: never later than the server's
	failure  error         // why the last renewal did not get through (nil: none since)
	queued   bool          // handed to a sender, its reply not in yet
	out      bool          // out of the loop (released or lost): nothing more is sent for it
	gen      int           // bumped by Extend: an older renewal's reply does not set the lease
	flight   chan struct{} // while a renewal is sent and unanswered: closed by its answer
	index    int           // in the renewer's heap
	own      *sender       // a session hold's sender, on the hold's own connection, or nil
}

// renewEvery is the renewal interval of a ttl.
func renewEvery(ttl time.Duration) time.Duration { return max(ttl/3, time.Millisecond) }

// retryAfter is how soon a renewal that did not get through is sent again: soon, so that a
// failover or a restart is followed before the lease ends.
func retryAfter(ttl time.Duration) time.Duration { return min(renewEvery(ttl), 4*retryPause) }

// next is when the loop looks at r again: its renewal, or its lease's end.
func (r *renewal) next() time.Time {
	if r.queued || r.leaseEnd.Before(r.due) {
		return r.leaseEnd
	}
	return r.due
}

// errNoRenewalReply: the lease ended while a renewal's reply was awaited.
var errNoRenewalReply = errors.New("no reply to the renewal")

// A renewer is a Locker's renewal loop.
type renewer struct {
	l       *Locker
	mu      sync.Mutex
	holds   renewalHeap
	senders map[string]*sender // by node address, while the loop runs
	running bool
	wake    chan struct{}
}

func newRenewer(l *Locker) *renewer {
	return &renewer{l: l, wake: make(chan struct{}, 1)}
}

// add puts a new hold in the loop (starting the loop if it does not run).
func (w *renewer) add(r *renewal) {
	if r.own != nil {
		go r.own.run()
	}
	w.mu.Lock()
	heap.Push(&w.holds, r)
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		go w.run()
	} else {
		w.poke()
	}
}

// remove takes r out of the loop (a release): after it returns no renewal of r is sent, and
// the reply of one already sent is ignored. Only r's renewal is given up: the others in its
// pipeline go on.
func (w *renewer) remove(r *renewal) {
	w.mu.Lock()
	w.takeOut(r)
	w.mu.Unlock()
	if r.own != nil {
		r.own.stop()
	}
	w.poke()
}

// extending notes, before an extend of r is sent, that the loop renews by ttl from now on
// (rule 20): the renewals claimed from now carry ttl, and the answer of one claimed before
// does not set the lease. It returns what closes when that one is answered (nil: none on its
// way): the extend waits for it, or an old-ttl renewal run after the extend (on the other
// connection) would shorten the lease behind the client's back (rule 15).
func (w *renewer) extending(r *renewal, ttl time.Duration) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.out {
		return nil
	}
	r.ttl, r.gen = ttl, r.gen+1
	return r.flight
}

// landed notes, under mu, that r's renewal on its way was answered (or given up).
func (r *renewal) landed() {
	if r.flight != nil {
		close(r.flight)
		r.flight = nil
	}
}

// extended notes that Extend renewed r (sent at sent) for ttl: the loop renews by ttl now.
func (w *renewer) extended(r *renewal, sent time.Time, ttl time.Duration) {
	w.mu.Lock()
	if !r.out {
		r.ttl, r.gen, r.failure = ttl, r.gen+1, nil
		r.leaseEnd, r.due = sent.Add(ttl), sent.Add(renewEvery(ttl))
		heap.Fix(&w.holds, r.index)
	}
	w.mu.Unlock()
	w.poke()
}

// endNoLaterThan moves r's lease end to end when that is sooner (an extend that failed with
// err may have run), and renews r at once: by its ttl, the extend's, so a hold the server
// still has stays held. Lost at end otherwise, for err.
func (w *renewer) endNoLaterThan(r *renewal, end time.Time, err error) {
	w.mu.Lock()
	if !r.out && end.Before(r.leaseEnd) {
		r.leaseEnd, r.due, r.failure = end, time.Now(), err
		heap.Fix(&w.holds, r.index)
	}
	w.mu.Unlock()
	w.poke()
}

// takeOut marks r out of the loop, under mu.
func (w *renewer) takeOut(r *renewal) {
	if !r.out {
		r.out = true
		heap.Remove(&w.holds, r.index)
	}
}

func (w *renewer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// A loss is a hold to mark lost, and why.
type loss struct {
	r      *renewal
	reason string
}

// lose marks the holds lost (outside mu) and stops their own senders.
func lose(losses []loss) {
	for _, x := range losses {
		x.r.lock.lose(x.reason, held)
		if x.r.own != nil {
			x.r.own.stop()
		}
	}
}

// run is the loop: it wakes at the next renewal or lease end (or when poked), and ends when
// no hold is left.
func (w *renewer) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, losses, next, live := w.step(time.Now())
		lose(losses)
		if !live {
			return
		}
		w.dispatch(due)
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-w.wake:
		}
	}
}

// step takes from the heap what is due at now: the renewals to send (with those due within a
// tenth of their interval, which join them rather than go alone a moment later: never one
// sent late to wait for others), and the holds whose lease has ended. It returns when to look
// again, or live false when the loop has ended (no hold left: its senders are stopped).
func (w *renewer) step(now time.Time) (due []*renewal, losses []loss, next time.Time, live bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.holds) > 0 {
		r := w.holds[0]
		early := time.Duration(0)
		if len(due) > 0 {
			early = renewEvery(r.ttl) / 10
		}
		switch {
		case !r.leaseEnd.After(now):
			w.takeOut(r)
			failure := r.failure
			if failure == nil {
				failure = errNoRenewalReply
			}
			losses = append(losses, loss{r, reasonUnreachable + failure.Error()})
		case !r.queued && !r.due.After(now.Add(early)):
			r.queued = true
			heap.Fix(&w.holds, 0)
			due = append(due, r)
		default:
			return due, losses, r.next(), true
		}
	}
	senders := w.senders
	w.senders, w.running = nil, false
	for _, s := range senders {
		s.stop()
	}
	return nil, losses, now, false
}

// dispatch hands each due renewal to the sender of its node (in a cluster, the master of its
// key's slot now).
func (w *renewer) dispatch(due []*renewal) {
	batches := map[*sender][]*renewal{}
	for _, r := range due {
		s, err := w.senderFor(r)
		switch {
		case errors.Is(err, errUnsupported):
			w.fail([]*renewal{r}, reasonFailed+err.Error())
			continue
		case err != nil:
			w.failed([]*renewal{r}, err)
			continue
		}
		batches[s] = append(batches[s], r)
	}
	for s, batch := range batches {
		s.queue(batch)
	}
}

// senderFor is the sender of r: its own (a session hold), or its node's (started when new).
func (w *renewer) senderFor(r *renewal) (*sender, error) {
	if r.own != nil {
		return r.own, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.l.bound)
	defer cancel()
	base, err := w.l.node(ctx, r.lock.key)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.senders[base.Addr]
	if s == nil {
		if w.senders == nil {
			w.senders = map[string]*sender{}
		}
		s = newSender(w, base, nil)
		w.senders[base.Addr] = s
		go s.run()
	}
	return s, nil
}

// failed notes that the renewals in batch did not get through, for err: sent again soon,
// and lost at their lease's end unless one gets through first.
func (w *renewer) failed(batch []*renewal, err error) {
	now := time.Now()
	w.mu.Lock()
	for _, r := range batch {
		if !r.out {
			r.queued, r.failure, r.due = false, err, now.Add(retryAfter(r.ttl))
			heap.Fix(&w.holds, r.index)
		}
	}
	w.mu.Unlock()
	w.poke()
}

// renewalHeap orders the loop's holds by when it looks at them next.
type renewalHeap []*renewal

func (h renewalHeap) Len() int           { return len(h) }
func (h renewalHeap) Less(i, j int) bool { return h[i].next().Before(h[j].next()) }
func (h renewalHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *renewalHeap) Push(x any) {
	r := x.(*renewal)
	r.index = len(*h)
	*h = append(*h, r)
}
func (h *renewalHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.index = -1
	return r
}
