package redislock_test

// Rule 15 (loss at the lease's end) and rules 16-17 with the "same case, same answer" table of
// docs/clients.md: one test per row, on a server of its own.

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

// lossAtTheLeasesEnd holds a 3 s lease, lets stop cut the server off, and checks that the loss
// is seen at the lease's end: not before the earliest end (the lease began after Obtain was
// called), and within 10% of the ttl plus 100 ms after the latest (Obtain's return + ttl).
func lossAtTheLeasesEnd(t *testing.T, stop func(*testserver.Server)) {
	s := server(t)
	const ttl = 3 * time.Second
	called := time.Now()
	lock := obtain(t, lockerAt(t, s.Addr()), "k", ttl)
	returned := time.Now()
	stop(s)
	select {
	case <-lock.Lost():
	case <-time.After(2 * ttl):
		t.Fatalf("not lost %v after the lease", ttl)
	}
	lost := time.Now()
	earliest, latest := called.Add(ttl), returned.Add(ttl+ttl/10+100*time.Millisecond)
	t.Logf("lost %v after the lease's end (%v after Obtain returned): %v", lost.Sub(returned.Add(ttl)),
		lost.Sub(returned), lock.Err())
	if lost.Before(earliest) || lost.After(latest) {
		t.Fatalf("lost %v after Obtain returned, want within [%v, %v]", lost.Sub(returned),
			earliest.Sub(returned), latest.Sub(returned))
	}
	if err := lock.Err(); !errors.Is(err, redislock.ErrLost) || !strings.Contains(err.Error(), "before the lease ended") {
		t.Fatalf("Err: %v", err)
	}
	release(t, lock, false) // known lost: at once, without the server
}

// Rule 15: the server stopped (killed by PID) under a live hold.
func TestLossIsSeenAtTheLeasesEndWhenTheServerStops(t *testing.T) {
	lossAtTheLeasesEnd(t, func(s *testserver.Server) { s.Kill() })
}

// Rule 15: the server frozen (SIGSTOP) under a live hold: the renewal's reply is awaited no
// longer than the lease lasts.
func TestLossIsSeenAtTheLeasesEndWhenTheServerFreezes(t *testing.T) {
	lossAtTheLeasesEnd(t, func(s *testserver.Server) {
		s.Signal(syscall.SIGSTOP)
		t.Cleanup(func() { s.Signal(syscall.SIGCONT) })
	})
}

// Table: a release that finds the lease already gone answers false, closes Lost, and Err
// matches ErrLost; a second release sends nothing.
func TestAReleaseThatFindsTheLeaseGoneMarksTheHoldLost(t *testing.T) {
	r := client(t, server(t))
	lock := obtain(t, redislock.New(r), "k", 30*time.Second) // first renewal 10 s away
	r.Do(ctx, "LOCK.FORCERELEASE", "k")
	release(t, lock, false)
	lostFor(t, lock, "the hold was gone when released (its lease ran out)")
	release(t, lock, false)
	if n := calls(r, "lock.release"); n != 1 {
		t.Fatalf("%d LOCK.RELEASE sent, want 1 (the second release sends nothing)", n)
	}
}

// lostFor fails the test unless lock is known lost (Lost closed), Err matching ErrLost and
// ending with reason (rule 8's, word for word).
func lostFor(t *testing.T, lock *redislock.Lock, reason string) {
	t.Helper()
	select {
	case <-lock.Lost():
	default:
		t.Fatal("Lost is not closed")
	}
	if err := lock.Err(); !errors.Is(err, redislock.ErrLost) || !strings.HasSuffix(err.Error(), ": "+reason) {
		t.Fatalf("Err: %v, want the reason %q", err, reason)
	}
}

// lostHold is a hold its watchdog found lost (force-released under a 300 ms lease).
func lostHold(t *testing.T, r *redis.Client) *redislock.Lock {
	t.Helper()
	lock := obtain(t, redislock.New(r), "k", 300*time.Millisecond)
	r.Do(ctx, "LOCK.FORCERELEASE", "k")
	select {
	case <-lock.Lost():
	case <-time.After(2 * time.Second): // the next renewal, 100 ms away, finds it gone
		t.Fatal("not lost")
	}
	return lock
}

// Table: the release of a hold known lost answers false, nil without the server.
func TestReleaseOfAHoldKnownLostSendsNothing(t *testing.T) {
	r := client(t, server(t))
	lock := lostHold(t, r)
	release(t, lock, false)
	if n := calls(r, "lock.release"); n != 0 {
		t.Fatalf("%d LOCK.RELEASE sent", n)
	}
}

// Table: a guarded write of a hold known lost fails with ErrStale without the server.
func TestGuardOfAHoldKnownLostSendsNothing(t *testing.T) {
	r := client(t, server(t))
	lock := lostHold(t, r)
	if err := lock.Guard(ctx, "SET", "x", "1").Err(); !errors.Is(err, redislock.ErrStale) {
		t.Fatalf("Guard: %v", err)
	}
	if n := calls(r, "lock.guard"); n != 0 {
		t.Fatalf("%d LOCK.GUARD sent", n)
	}
	release(t, lock, false)
}

// Table: release twice answers true, then false without the server.
func TestReleaseTwiceAnswersTrueThenFalse(t *testing.T) {
	r := client(t, server(t))
	lock := obtain(t, redislock.New(r), "k", 10*time.Second)
	release(t, lock, true)
	release(t, lock, false)
	if n := calls(r, "lock.release"); n != 1 {
		t.Fatalf("%d LOCK.RELEASE sent, want 1", n)
	}
}

// Table: a ttl of 0 or under 1 ms, and a negative wait, are ErrInvalidArgument, nothing sent.
func TestATtlUnder1msOrANegativeWaitIsAnInvalidArgument(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	for _, ttl := range []time.Duration{0, 999 * time.Microsecond, -time.Second} {
		if _, err := l.Obtain(ctx, "k", ttl); !errors.Is(err, redislock.ErrInvalidArgument) {
			t.Fatalf("ttl %v: %v", ttl, err)
		}
	}
	if _, err := l.Obtain(ctx, "k", time.Second, redislock.WithWait(-time.Millisecond)); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("WithWait(-1ms): %v", err)
	}
	if n := calls(r, "lock.acquire"); n != 0 {
		t.Fatalf("%d LOCK.ACQUIRE sent", n)
	}
}

// Table: a ttl of 1.5 ms is sent as a 2 ms lease (whole milliseconds, rounded up); the
// server's slow log shows the command as it came.
func TestATtlOf1point5msIsA2msLease(t *testing.T) {
	r := client(t, server(t, "--slowlog-log-slower-than", "0"))
	lock := obtain(t, redislock.New(r), "k", 1500*time.Microsecond, redislock.WithWatchdog(false), redislock.WithWait(0))
	entries, err := r.SlowLogGet(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	var sent []string
	for _, e := range entries {
		if len(e.Args) > 3 && strings.EqualFold(e.Args[0], "LOCK.ACQUIRE") {
			sent = e.Args
		}
	}
	if len(sent) < 4 || sent[3] != "2" {
		t.Fatalf("LOCK.ACQUIRE sent as %q, want the ttl 2", sent)
	}
	_, _ = lock.Release(ctx)
}

// Table: the default wait is without limit (a waiter still waits after 1.5 s, then is granted),
// and WithWait(0) tries once.
func TestTheDefaultWaitIsWithoutLimitAndWithWait0TriesOnce(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	holder := obtain(t, l, "k", 10*time.Second)
	started := time.Now()
	if _, err := l.Obtain(ctx, "k", time.Second, redislock.WithWait(0)); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("WithWait(0): %v", err)
	}
	if took := time.Since(started); took > 500*time.Millisecond { // one round trip, and 500 ms of load
		t.Fatalf("WithWait(0) took %v", took)
	}
	waiting := obtainAsync(ctx, l, "k", time.Second)
	select {
	case got := <-waiting:
		t.Fatalf("the default wait ended: %v", got.err)
	case <-time.After(1500 * time.Millisecond):
	}
	release(t, holder, true)
	got := await(t, waiting, 5*time.Second)
	if got.err != nil {
		t.Fatal(got.err)
	}
	release(t, got.lock, true)
}

// Table: a wait of 1 ms or less on a free lock is granted: one ask is always sent.
func TestAWaitOf1msOrLessOnAFreeLockIsGranted(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	for _, wait := range []time.Duration{time.Millisecond, time.Microsecond, time.Nanosecond} {
		lock := obtain(t, l, "k", time.Second, redislock.WithWait(wait))
		release(t, lock, true)
	}
	if n := calls(r, "lock.acquire"); n != 3 {
		t.Fatalf("%d LOCK.ACQUIRE sent, want 3", n)
	}
}

// Table: a fixed lease (WithWatchdog(false)) is lost at its end, by a timer: Lost closes then
// (not before the earliest end, within 10% of the ttl plus 100 ms after the latest), and
// release and guard answer without the server.
func TestAFixedLeaseIsLostAtItsEnd(t *testing.T) {
	r := client(t, server(t))
	const ttl = time.Second
	called := time.Now()
	lock := obtain(t, redislock.New(r), "k", ttl, redislock.WithWatchdog(false))
	returned := time.Now()
	select {
	case <-lock.Lost():
	case <-time.After(2 * ttl):
		t.Fatalf("not lost %v after the lease", ttl)
	}
	lost := time.Now()
	earliest, latest := called.Add(ttl), returned.Add(ttl+ttl/10+100*time.Millisecond)
	if lost.Before(earliest) || lost.After(latest) {
		t.Fatalf("lost %v after Obtain returned, want within [%v, %v]", lost.Sub(returned),
			earliest.Sub(returned), latest.Sub(returned))
	}
	t.Logf("lost %v after Obtain returned: %v", lost.Sub(returned), lock.Err())
	if err := lock.Err(); !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("Err: %v", err)
	}
	if err := lock.Guard(ctx, "SET", "x", "1").Err(); !errors.Is(err, redislock.ErrStale) {
		t.Fatalf("Guard: %v", err)
	}
	release(t, lock, false)
	if n := calls(r, "lock.guard") + calls(r, "lock.release"); n != 0 {
		t.Fatalf("%d LOCK.GUARD or LOCK.RELEASE sent", n)
	}
}

// Table, rule 20: extend of a live hold answers true; the lease ends ttl from now (LOCK.INFO's
// ttl), and the watchdog renews by that ttl: a 30 s hold extended to 1.5 s outlives 1.5 s
// only if the loop renews it every 500 ms, not every 10 s.
func TestExtendOfALiveHoldMovesItsLease(t *testing.T) {
	r := client(t, server(t))
	lock := obtain(t, redislock.New(r), "k", 30*time.Second)
	if ok, err := lock.Extend(ctx, 1500*time.Millisecond); !ok || err != nil {
		t.Fatalf("Extend = %v, %v; want true", ok, err)
	}
	if left := info(t, r, "k")["ttl"].(int64); left > 1500 {
		t.Fatalf("LOCK.INFO ttl %d ms after Extend(1.5s)", left)
	}
	// Two leases of 1.5 s: renewals every 500 ms with 1 s of slack each.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		if fence(r, "k") != lock.Token() {
			t.Fatalf("not renewed by the new ttl: %v", lock.Err())
		}
	}
	if left := info(t, r, "k")["ttl"].(int64); left > 1500 {
		t.Fatalf("renewed by %d ms, want by 1.5 s", left)
	}
	// A fixed lease is kept on the caller's schedule: 1 s extended to 3 s outlives its 1 s.
	fixed := obtain(t, redislock.New(r), "f", time.Second, redislock.WithWatchdog(false))
	if ok, err := fixed.Extend(ctx, 3*time.Second); !ok || err != nil {
		t.Fatalf("Extend of a fixed lease = %v, %v; want true", ok, err)
	}
	time.Sleep(1500 * time.Millisecond) // past the first end, 1.5 s before the new one
	if fixed.Err() != nil || fence(r, "f") != fixed.Token() {
		t.Fatalf("the fixed lease ended at its first end: %v", fixed.Err())
	}
	release(t, lock, true)
	release(t, fixed, true)
}

// Table, rule 20: extend answered 0 (the lease gone: force-released) answers false and marks
// the hold lost, once, with the reason of a renewal answered 0.
func TestExtendAnswered0MarksTheHoldLost(t *testing.T) {
	r := client(t, server(t))
	lock := obtain(t, redislock.New(r), "k", 30*time.Second) // first renewal 10 s away
	r.Do(ctx, "LOCK.FORCERELEASE", "k")
	if ok, err := lock.Extend(ctx, 30*time.Second); ok || err != nil {
		t.Fatalf("Extend = %v, %v; want false, nil", ok, err)
	}
	lostFor(t, lock, "the lease ran out before it was renewed")
	release(t, lock, false)
}

// Table, rule 20: extend of a hold known lost or released answers false, nil without the
// server.
func TestExtendOfAHoldKnownLostOrReleasedSendsNothing(t *testing.T) {
	r := client(t, server(t))
	lost := lostHold(t, r)
	released := obtain(t, redislock.New(r), "r", 10*time.Second)
	release(t, released, true)
	before := calls(r, "lock.extend")
	for _, lock := range []*redislock.Lock{lost, released} {
		if ok, err := lock.Extend(ctx, time.Second); ok || err != nil {
			t.Fatalf("Extend of %s = %v, %v; want false, nil", lock.Key(), ok, err)
		}
	}
	if n := calls(r, "lock.extend") - before; n != 0 {
		t.Fatalf("%d LOCK.EXTEND sent", n)
	}
	if _, err := released.Extend(ctx, 0); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("Extend(0): %v", err)
	}
}

// Table, rule 19: a retryable reply to an acquire (READONLY: the server is a replica) is asked
// again with the same owner; once the replica is promoted, before the caller's deadline, the
// hold is granted there, to that owner.
func TestARetryableReplyToAnAcquireIsAskedAgain(t *testing.T) {
	master := server(t)
	s := server(t)
	r := client(t, s)
	if err := r.Do(ctx, "REPLICAOF", "127.0.0.1", itoa(int64(master.Port))).Err(); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waiting := obtainAsync(waitCtx, redislock.New(r), "k", 5*time.Second, redislock.WithOwner("asker"))
	eventually(t, 5*time.Second, "LOCK.ACQUIRE answered READONLY", func() bool {
		return testserver.Info(ctx, r, "errorstats", "errorstat_READONLY") != ""
	})
	if err := r.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	got := await(t, waiting, 10*time.Second)
	if got.err != nil {
		t.Fatalf("Obtain: %v", got.err)
	}
	if info(t, r, "k")["owner"] != "asker" || fence(r, "k") != got.lock.Token() {
		t.Fatalf("the hold on the promoted server: %v", info(t, r, "k"))
	}
	release(t, got.lock, true)
}

// Rule 19: a replica that stays one answers READONLY until the caller's deadline (WithWait's,
// or the context's): the lock service cannot serve the key, ErrUnavailable with that reply.
func TestARetryableReplyUntilTheDeadlineIsUnavailable(t *testing.T) {
	master := server(t)
	r := client(t, server(t, "--replicaof", "127.0.0.1", itoa(int64(master.Port))))
	l := redislock.New(r)
	for _, call := range []func() error{
		func() error {
			return unavailableErr(l.Obtain(ctx, "k", time.Second, redislock.WithWait(300*time.Millisecond)))
		},
		func() error {
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			return unavailableErr(l.Obtain(short, "k", time.Second))
		},
	} {
		started := time.Now()
		err := call()
		if !errors.Is(err, redislock.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
			t.Fatalf("Obtain: %v", err)
		}
		if took := time.Since(started); took > 300*time.Millisecond+margin {
			t.Fatalf("unavailable after %v, want at the 300 ms deadline", took)
		}
	}
}

// Table, rule 8: a renewal refused (ACL SETUSER took lock.extend away from the loop's user)
// loses the hold once, with the reason "renewal refused: NOPERM ...".
func TestARenewalRefusedLosesTheHoldOnceWithTheReply(t *testing.T) {
	r := client(t, server(t))
	lock := obtain(t, redislock.New(r), "k", 1500*time.Millisecond) // renewals every 500 ms
	if err := r.Do(ctx, "ACL", "SETUSER", "default", "-lock.extend").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Do(ctx, "ACL", "SETUSER", "default", "+@all") })
	select {
	case <-lock.Lost():
	case <-time.After(3 * time.Second): // the next renewal within 500 ms; 2.5 s for load
		t.Fatal("not reported lost")
	}
	if err := lock.Err(); !strings.Contains(err.Error(), ": renewal refused: NOPERM") {
		t.Fatalf("Err: %v", err)
	}
	release(t, lock, false)
}
