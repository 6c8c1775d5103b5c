package redislock

import (
	"container/heap"
	"context"
	"errors"
	"testing"
	"time"
)

// The loop's schedule (rules 6 and 15), without a server: what step takes from the heap at a
// given moment. No goroutine runs: step is called with the moment.

// scheduled is a renewer holding renewals of ttl, due and ending as given (relative to at).
func scheduled(at time.Time, ttl time.Duration, dueEnd ...[2]time.Duration) (*renewer, []*renewal) {
	w := newRenewer(New(nil))
	w.running = true
	var all []*renewal
	for _, de := range dueEnd {
		r := &renewal{lock: &Lock{key: "k", lost: make(chan struct{})}, ttl: ttl, due: at.Add(de[0]), leaseEnd: at.Add(de[1])}
		heap.Push(&w.holds, r)
		all = append(all, r)
	}
	return w, all
}

// A renewal falling due takes with it those due within a tenth of their interval, not later
// ones; the loop looks again when the next falls due.
func TestStepSendsTheDueAndThoseWithinATenthOfTheirInterval(t *testing.T) {
	now := time.Now()
	const ttl = 3 * time.Second // renewed every 1 s: a tenth is 100 ms
	w, r := scheduled(now, ttl,
		[2]time.Duration{0, 2 * time.Second},                      // due now
		[2]time.Duration{90 * time.Millisecond, 2 * time.Second},  // within a tenth: joins
		[2]time.Duration{150 * time.Millisecond, 2 * time.Second}, // later: alone, then
	)
	due, losses, next, live := w.step(now)
	if !live || len(losses) != 0 || len(due) != 2 || due[0] != r[0] || due[1] != r[1] {
		t.Fatalf("due %d, losses %d, live %v", len(due), len(losses), live)
	}
	if !next.Equal(r[2].due) {
		t.Fatalf("next look at %v, want the third's due %v", next.Sub(now), r[2].due.Sub(now))
	}
	// Nothing is due before then: none goes early alone.
	if due, _, _, _ := w.step(now.Add(40 * time.Millisecond)); len(due) != 0 {
		t.Fatalf("%d sent early alone", len(due))
	}
}

// A hold whose lease end passes with no renewal through (its reply still awaited) is lost at
// that moment, with the last failure as the cause; the loop ends with its last hold.
func TestStepLosesAHoldAtItsLeasesEnd(t *testing.T) {
	now := time.Now()
	w, r := scheduled(now, 3*time.Second, [2]time.Duration{-2 * time.Second, 0})
	r[0].queued = true // a renewal on its way, unanswered
	due, losses, _, live := w.step(now)
	want := "the server could not be reached before the lease ended: no reply to the renewal"
	if len(due) != 0 || len(losses) != 1 || losses[0].reason != want {
		t.Fatalf("due %d, losses %+v", len(due), losses)
	}
	if live || !r[0].out {
		t.Fatalf("the loop goes on without holds (live %v), or the hold is still in it", live)
	}
}

// Rule 20: an extend called while a renewal of its hold is on its way gets that renewal's
// answer to wait for (and the loop renews by the new ttl from then on); when the answer does
// not come within the extend's context, the extend is unavailable (nothing is sent).
func TestAnExtendWaitsForTheRenewalOnItsWay(t *testing.T) {
	now := time.Now()
	w, r := scheduled(now, 3*time.Second, [2]time.Duration{0, 3 * time.Second})
	claimed, _ := w.claim(r)
	flight := w.extending(r[0], 10*time.Second)
	if flight == nil || r[0].ttl != 10*time.Second || r[0].gen != claimed[0].gen+1 {
		t.Fatalf("flight %v, ttl %v, gen %d (claimed with %d)", flight, r[0].ttl, r[0].gen, claimed[0].gen)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.l.landFirst(short, "k", flight); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("landFirst with no answer: %v, want ErrUnavailable", err)
	}
	w.mu.Lock()
	r[0].landed()
	w.mu.Unlock()
	if err := w.l.landFirst(context.Background(), "k", flight); err != nil {
		t.Fatalf("landFirst once answered: %v", err)
	}
	if w.extending(r[0], time.Second) != nil {
		t.Fatal("a renewal to wait for when none is on its way")
	}
}

// Rule 15: an extend that got no answer may have run: the lease end becomes no later than its
// send plus its ttl (never later than it was), and the hold is renewed at once by that ttl;
// with no renewal through by then, it is lost then, for the extend's error.
func TestAnUnansweredExtendEndsTheLeaseNoLaterThanItsTTL(t *testing.T) {
	now := time.Now()
	w, r := scheduled(now, 30*time.Second, [2]time.Duration{10 * time.Second, 30 * time.Second})
	w.extending(r[0], time.Second)
	cut := errors.New("cut")
	w.endNoLaterThan(r[0], now.Add(time.Second), cut)
	w.endNoLaterThan(r[0], now.Add(2*time.Second), cut) // later: not moved
	if !r[0].leaseEnd.Equal(now.Add(time.Second)) {
		t.Fatalf("lease end %v from now, want 1s", r[0].leaseEnd.Sub(now))
	}
	due, _, _, _ := w.step(now.Add(time.Millisecond))
	if len(due) != 1 || r[0].ttl != time.Second {
		t.Fatalf("%d due at once, ttl %v; want 1, by 1s", len(due), r[0].ttl)
	}
	_, losses, _, _ := w.step(now.Add(time.Second))
	want := "the server could not be reached before the lease ended: cut"
	if len(losses) != 1 || losses[0].reason != want {
		t.Fatalf("losses %+v at the capped end", losses)
	}
}
