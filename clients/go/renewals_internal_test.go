package redislock

import (
	"container/heap"
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
