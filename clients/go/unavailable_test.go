package redislock_test

// Rule 14 (a lock service that cannot be reached or is not Redis answers ErrUnavailable within
// the Locker's bound, never a hang) and rule 18 (nothing logged), each on real servers or a
// tiny TCP service of the test. The bound is 1 s here so the tests stay short; every limit
// below is that bound plus a margin written beside it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

// bound is the unavailability bound of these tests' Lockers.
const bound = time.Second

// margin is what a loaded 2-core machine may add to a bound: timers, a PING's dial.
const margin = time.Second

// service is a TCP service of the test on a loopback port that is not Redis: answer is
// called with each connection it accepts (and the connection is closed after it returns, or
// at the test's end).
func service(t *testing.T, answer func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				answer(c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// answersHTTP reads a request and answers as a web server does to what is not HTTP.
func answersHTTP(c net.Conn) {
	_, _ = c.Read(make([]byte, 512))
	_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

// neverAnswers reads until the connection closes and answers nothing.
func neverAnswers(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

// closedPort is a loopback address where nothing listens.
func closedPort() string { return fmt.Sprintf("127.0.0.1:%d", testserver.FreePort()) }

// lockerAt is a Locker with the tests' bound on a client of addr (closed at the test's end).
func lockerAt(t *testing.T, addr string) *redislock.Locker {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	l := redislock.New(c, redislock.WithUnavailableAfter(bound))
	t.Cleanup(func() {
		_ = l.Close()
		_ = c.Close()
	})
	return l
}

// unavailableWithin runs Obtain and fails the test unless it answers an *UnavailableError
// naming addr within limit (and not ErrNotObtained).
func unavailableWithin(t *testing.T, l *redislock.Locker, ctx context.Context, addr string, limit time.Duration, opts ...redislock.Option) error {
	t.Helper()
	started := time.Now()
	_, err := l.Obtain(ctx, "k", 10*time.Second, opts...)
	took := time.Since(started)
	var unavailable *redislock.UnavailableError
	switch {
	case !errors.As(err, &unavailable) || !errors.Is(err, redislock.ErrUnavailable):
		t.Fatalf("after %v: %v (%T), want an *UnavailableError", took, err, err)
	case errors.Is(err, redislock.ErrNotObtained):
		t.Fatalf("unavailable and not obtained at once: %v", err)
	case unavailable.Addr != addr || !strings.Contains(err.Error(), "unavailable at "+addr+": "):
		t.Fatalf("the error does not name %s: %v", addr, err)
	case took > limit:
		t.Fatalf("unavailable after %v, want within %v: %v", took, limit, err)
	}
	t.Logf("%v after %v", err, took)
	return err
}

// Rule 14: a wrong address (nothing listens) is unavailable, with the default wait (without
// limit) within the bound, with a shorter deadline at the deadline, and at once for one try.
func TestAWrongAddressIsUnavailableWithinTheBound(t *testing.T) {
	addr := closedPort()
	l := lockerAt(t, addr)
	err := unavailableWithin(t, l, ctx, addr, bound+margin)
	if !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("the cause is not named: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, bound/2)
	defer cancel()
	unavailableWithin(t, l, short, addr, bound/2+margin)
	unavailableWithin(t, l, ctx, addr, margin, redislock.WithWait(0)) // one try
	unavailableWithin(t, l, ctx, addr, bound+margin, redislock.WithSession())
}

// Rule 14: a service that answers, but not as Redis (a web server), is unavailable within the
// bound, with or without a deadline; so is one that accepts and never answers (its wait is
// watched by PING: no answer within the bound).
func TestANonRedisServiceIsUnavailableWithinTheBound(t *testing.T) {
	web := service(t, answersHTTP)
	l := lockerAt(t, web)
	err := unavailableWithin(t, l, ctx, web, bound+margin)
	if !strings.Contains(err.Error(), "HTTP/1.1 400") {
		t.Fatalf("the cause is not the web server's answer: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, bound/2)
	defer cancel()
	unavailableWithin(t, l, short, web, bound/2+margin)

	mute := service(t, neverAnswers)
	l = lockerAt(t, mute)
	unavailableWithin(t, l, ctx, mute, bound+margin)
	short, cancel = context.WithTimeout(ctx, bound/2)
	defer cancel()
	unavailableWithin(t, l, short, mute, bound/2+bound+margin) // the deadline, then a PING of min(1 s, bound)
}

// Rule 14: a server without the module answers, but is not the lock service.
func TestAServerWithoutTheModuleIsUnavailable(t *testing.T) {
	s, err := testserver.StartPlain()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	err = unavailableWithin(t, lockerAt(t, s.Addr()), ctx, s.Addr(), margin)
	if !strings.Contains(err.Error(), "module is not loaded") {
		t.Fatalf("%v", err)
	}
}

// Rule 14: a server stopped (killed by PID) while one client holds the lock and another waits
// for it: the waiter is unavailable within the bound, and so is the holder's release.
func TestAStoppedServerLeavesNoWaiterHanging(t *testing.T) {
	s := server(t)
	holder := obtain(t, lockerAt(t, s.Addr()), "k", 10*time.Second)
	r := client(t, s)
	waiter := lockerAt(t, s.Addr())
	waiting := make(chan error, 1)
	go func() { waiting <- unavailableErr(waiter.Obtain(ctx, "k", 10*time.Second)) }()
	eventually(t, 2*time.Second, "the waiter is blocked", func() bool { return blocked(r) == "1" })
	s.Kill()
	stopped := time.Now()
	select {
	case err := <-waiting:
		if !errors.Is(err, redislock.ErrUnavailable) {
			t.Fatalf("the waiter: %v", err)
		}
		t.Logf("the waiter after %v: %v", time.Since(stopped), err)
	case <-time.After(bound + margin):
		t.Fatalf("the waiter still waits %v after the server stopped", bound+margin)
	}
	held, err := holder.Release(ctx)
	if held || !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Release = %v, %v; want false, ErrUnavailable", held, err)
	}
}

// Rule 14: a server frozen (SIGSTOP) while one client holds the lock and another waits: the
// waiter's connection stays open and silent; PING on another connection finds the server
// mute and the waiter is unavailable within the bound; so are the holder's guarded write and
// release. (Loss at the lease's end: parity_test.go.)
func TestAFrozenServerLeavesNoWaiterHanging(t *testing.T) {
	s := server(t)
	holder := obtain(t, lockerAt(t, s.Addr()), "k", 10*time.Second) // outlives the test
	r := client(t, s)
	waiter := lockerAt(t, s.Addr())
	waiting := make(chan error, 1)
	go func() { waiting <- unavailableErr(waiter.Obtain(ctx, "k", 10*time.Second)) }()
	eventually(t, 2*time.Second, "the waiter is blocked", func() bool { return blocked(r) == "1" })
	s.Signal(syscall.SIGSTOP)
	defer s.Signal(syscall.SIGCONT)
	frozen := time.Now()
	select {
	case err := <-waiting:
		if !errors.Is(err, redislock.ErrUnavailable) {
			t.Fatalf("the waiter: %v", err)
		}
		t.Logf("the waiter after %v: %v", time.Since(frozen), err)
	case <-time.After(bound + margin):
		t.Fatalf("the waiter still waits %v after the server froze", bound+margin)
	}
	// A caller's deadline ending while the server is frozen: unavailable, not "not obtained".
	short, cancel := context.WithTimeout(ctx, bound/2)
	defer cancel()
	unavailableWithin(t, waiter, short, s.Addr(), bound/2+bound+margin) // the deadline, then a PING of min(1 s, bound)
	// The holder's guarded write and release: unavailable within the bound too.
	started := time.Now()
	if err := holder.Guard(ctx, "SET", "x", "1").Err(); !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Guard: %v", err)
	}
	held, err := holder.Release(ctx)
	if held || !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Release = %v, %v; want false, ErrUnavailable", held, err)
	}
	if took := time.Since(started); took > 2*bound+margin { // a bound each
		t.Fatalf("Guard and Release took %v", took)
	}
}

func unavailableErr(_ *redislock.Lock, err error) error { return err }

// Rule 14: an unavailability bound that is not positive is refused before anything is sent.
func TestABoundThatIsNotPositiveIsAnInvalidArgument(t *testing.T) {
	r := client(t, server(t))
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := redislock.New(r, redislock.WithUnavailableAfter(d)).Obtain(ctx, "k", time.Second)
		if !errors.Is(err, redislock.ErrInvalidArgument) {
			t.Fatalf("WithUnavailableAfter(%v): %v", d, err)
		}
	}
	if n := calls(r, "lock.acquire"); n != 0 {
		t.Fatalf("%d LOCK.ACQUIRE sent", n)
	}
}

// logLines is a go-redis logger that keeps what it is asked to print.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Printf(_ context.Context, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// Rule 18: waiting on a wrong address makes go-redis log nothing (the package dials its own
// connections and says what failed in its error), and nothing is logged after Close.
func TestAnUnreachableServerAndCloseLogNothing(t *testing.T) {
	logged := &logLines{}
	redis.SetLogger(logged)
	defer redis.SetLogger(quiet{})
	addr := closedPort()
	c := redis.NewClient(&redis.Options{Addr: addr})
	l := redislock.New(c, redislock.WithUnavailableAfter(bound))
	if _, err := l.Obtain(ctx, "k", time.Second); !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Obtain: %v", err)
	}
	_ = l.Close()
	_ = c.Close()
	time.Sleep(1500 * time.Millisecond) // go-redis's dial probes run once a second
	if lines := logged.all(); len(lines) > 0 {
		t.Fatalf("go-redis logged %d lines: %q", len(lines), lines)
	}
}

// Table: a release while a renewal is in flight to a frozen server abandons the renewal (its
// reply would be awaited until the lease's end) and is unavailable within the bound.
func TestAReleaseWhileARenewalIsInFlightAbandonsIt(t *testing.T) {
	s := server(t)
	const ttl = 9 * time.Second // renewed every 3 s, a renewal's reply awaited up to 3 s
	obtained := time.Now()
	holder := obtain(t, lockerAt(t, s.Addr()), "k", ttl)
	s.Signal(syscall.SIGSTOP)
	defer s.Signal(syscall.SIGCONT)
	time.Sleep(time.Until(obtained.Add(ttl/3 + 300*time.Millisecond))) // the first renewal is on its way
	started := time.Now()
	held, err := holder.Release(ctx)
	took := time.Since(started)
	if held || !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Release = %v, %v; want false, ErrUnavailable", held, err)
	}
	// Awaiting the renewal would take 2.7 s more from here, then the bound.
	if took > bound+margin {
		t.Fatalf("Release took %v, want within %v", took, bound+margin)
	}
	t.Logf("Release after %v: %v", took, err)
}

// Table: a durable grant whose WAIT gets no answer (the server frozen while WAIT waits for a
// replica it does not have) or fails (the server stopped) is unavailable within the bound,
// not a hang nor the raw error.
func TestADurableGrantWhoseWaitFailsIsUnavailable(t *testing.T) {
	for name, stop := range map[string]func(*testserver.Server){
		"frozen": func(s *testserver.Server) {
			s.Signal(syscall.SIGSTOP)
			t.Cleanup(func() { s.Signal(syscall.SIGCONT) })
		},
		"stopped": func(s *testserver.Server) { s.Kill() },
	} {
		t.Run(name, func(t *testing.T) {
			s := server(t)
			r := client(t, s)
			l := lockerAt(t, s.Addr())
			got := make(chan error, 1)
			go func() {
				got <- unavailableErr(l.Obtain(ctx, "k", 10*time.Second, redislock.WithReplicas(1, 5*time.Second)))
			}()
			eventually(t, 2*time.Second, "WAIT waits", func() bool { return blocked(r) == "1" })
			stop(s)
			stopped := time.Now()
			select {
			case err := <-got:
				var unavailable *redislock.UnavailableError
				if !errors.As(err, &unavailable) || errors.Is(err, redislock.ErrNotObtained) {
					t.Fatalf("Obtain: %v (%T), want an *UnavailableError", err, err)
				}
				if took := time.Since(stopped); took > bound+margin {
					t.Fatalf("unavailable after %v, want within %v", took, bound+margin)
				}
				t.Logf("after %v: %v", time.Since(stopped), err)
			case <-time.After(5*time.Second + bound + margin): // WAIT's own timeout, then the bound
				t.Fatal("Obtain still waits")
			}
		})
	}
}

// dropsReplyTo is a TCP proxy of the test to the server at to that forwards everything, except
// that the first connection to send a chunk holding every one of parts (e.g. "LOCK.RELEASE") is
// cut once the chunk has reached the server (which runs it), its reply not passed on.
func dropsReplyTo(t *testing.T, to string, parts ...string) string {
	var dropped sync.Once
	return service(t, func(c net.Conn) {
		s, err := net.Dial("tcp", to)
		if err != nil {
			return
		}
		defer s.Close()
		var cut atomic.Bool
		go func() { // the server's replies, until the cut
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if err != nil || cut.Load() {
					return
				}
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if containsAll(string(buf[:n]), parts) {
				dropped.Do(func() { cut.Store(true) })
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
			if cut.Load() {
				time.Sleep(200 * time.Millisecond) // the server runs it; then both ends close
				return
			}
		}
	})
}

// containsAll reports whether s holds every one of parts.
func containsAll(s string, parts []string) bool {
	for _, part := range parts {
		if !strings.Contains(s, part) {
			return false
		}
	}
	return true
}

// Table: a release whose link breaks after it was sent (the server ran it, its reply is lost)
// is unavailable, and is not sent again (a second one would answer 0: as if the lease had gone).
func TestAReleaseWhoseReplyIsLostIsUnavailableAndNotSentAgain(t *testing.T) {
	s := server(t)
	r := client(t, s)
	proxy := dropsReplyTo(t, s.Addr(), "LOCK.RELEASE")
	lock := obtain(t, lockerAt(t, proxy), "k", 30*time.Second) // no renewal during the test
	held, err := lock.Release(ctx)
	if held || !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Release = %v, %v; want false, ErrUnavailable", held, err)
	}
	if n := calls(r, "lock.release"); n != 1 {
		t.Fatalf("%d LOCK.RELEASE ran, want 1 (never sent again)", n)
	}
	if m := info(t, r, "k"); m != nil {
		t.Fatalf("the lock is still held: %v", m)
	}
	select {
	case <-lock.Lost():
		t.Fatalf("the hold is reported lost: %v", lock.Err())
	default:
	}
	t.Logf("Release: %v", err)
}

// cutsShorterExtend is a proxy to the server at to that cuts the link of the first extend to
// 1 s (ttl 1000 ms in RESP) once the server has it: the extend runs, its reply is lost.
func cutsShorterExtend(t *testing.T, to string) string {
	return dropsReplyTo(t, to, "LOCK.EXTEND", "$4\r\n1000\r\n")
}

// extendUnanswered calls Extend(ttl), which must fail as unavailable (its reply lost), and
// returns when it was called: at or before the extend was sent.
func extendUnanswered(t *testing.T, lock *redislock.Lock, ttl time.Duration) time.Time {
	t.Helper()
	called := time.Now()
	if ok, err := lock.Extend(ctx, ttl); ok || !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Extend = %v, %v; want false, ErrUnavailable", ok, err)
	}
	return called
}

// lostBy is how soon after a 1 s extend was sent the client counts its lease ended: the
// server's ended 1 s after the extend ran; rule 15's tested margin is 10% of the ttl plus
// 100 ms (200 ms), and 1.3 s more is for a loaded 2-core machine.
const lostBy = 2500 * time.Millisecond

// Rules 15 and 20: an extend whose reply is lost may have run and shortened the lease. A
// fixed 30 s lease extended to 1 s that way is lost by lostBy after the extend was sent (not
// 30 s after the grant), for the fixed lease's reason; and the server no longer holds it.
func TestAFixedLeaseWhoseShorterExtendGotNoReplyEndsByTheExtend(t *testing.T) {
	s := server(t)
	r := client(t, s)
	l := lockerAt(t, cutsShorterExtend(t, s.Addr()))
	lock := obtain(t, l, "k", 30*time.Second, redislock.WithWatchdog(false))
	called := extendUnanswered(t, lock, time.Second)
	select {
	case <-lock.Lost():
	case <-time.After(time.Until(called.Add(lostBy))):
		t.Fatalf("not lost %v after the extend was called", lostBy)
	}
	t.Logf("lost %v after the extend was called: %v", time.Since(called), lock.Err())
	if err := lock.Err(); !strings.Contains(err.Error(), "a fixed lease, not extended in time") {
		t.Fatalf("Err: %v; want the fixed lease's end", err)
	}
	time.Sleep(time.Until(called.Add(lostBy))) // the server's lease ended 1 s after the extend
	if m := info(t, r, "k"); m != nil {
		t.Fatalf("the server still holds the lock: %v", m)
	}
}

// Rules 15 and 20: as above with the watchdog on. The lease may now end 1 s after the extend,
// so it is renewed at once by 1 s: lostBy after the extend was sent the hold is live, and the
// server holds it with at most 1 s left (renewed by the new ttl; 30 s ago it had 30 s).
func TestAWatchdogHoldWhoseShorterExtendGotNoReplyIsRenewedByIt(t *testing.T) {
	s := server(t)
	r := client(t, s)
	lock := obtain(t, lockerAt(t, cutsShorterExtend(t, s.Addr())), "k", 30*time.Second)
	called := extendUnanswered(t, lock, time.Second)
	time.Sleep(time.Until(called.Add(lostBy)))
	if err := lock.Err(); err != nil {
		t.Fatalf("lost %v after the extend was called: %v", lostBy, err)
	}
	if left, _ := info(t, r, "k")["ttl"].(int64); left <= 0 || left > 1000 {
		t.Fatalf("LOCK.INFO ttl %d ms %v after the extend, want in (0, 1000]", left, lostBy)
	}
	release(t, lock, true)
}

// Table: the caller's deadline (the context's, or WithWait's) passes while the server is
// silent (frozen; a service that never answers): unavailable at most min(1 s, bound) after it,
// not at the bound (5 s here).
func TestACallersDeadlineWhileTheServerIsSilentIsUnavailable(t *testing.T) {
	s := server(t)
	s.Signal(syscall.SIGSTOP)
	defer s.Signal(syscall.SIGCONT)
	for _, addr := range []string{s.Addr(), service(t, neverAnswers)} {
		c := redis.NewClient(&redis.Options{Addr: addr})
		l := redislock.New(c, redislock.WithUnavailableAfter(5*time.Second))
		t.Cleanup(func() {
			_ = l.Close()
			_ = c.Close()
		})
		const deadline = 300 * time.Millisecond
		short, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		limit := deadline + time.Second + margin // min(1 s, bound) after the deadline
		unavailableWithin(t, l, short, addr, limit)
		unavailableWithin(t, l, ctx, addr, limit, redislock.WithWait(deadline))
	}
}

// dials counts the connections a go-redis client dials (a dial hook).
type dials struct{ n atomic.Int64 }

func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (*dials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (*dials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Table: the try-once form (WithWait(0)) on a server that stopped is unavailable at its first
// failure: one attempt (one dial of the client's pool), not go-redis's retries of the command.
func TestTheTryOnceFormIsUnavailableAtItsFirstFailure(t *testing.T) {
	s := server(t)
	c := client(t, s)
	counted := &dials{}
	c.AddHook(counted)
	l := redislock.New(c, redislock.WithUnavailableAfter(5*time.Second))
	release(t, obtain(t, l, "k", time.Second, redislock.WithWait(0), redislock.WithWatchdog(false)), true)
	s.Kill()
	before := counted.n.Load()
	unavailableWithin(t, l, ctx, s.Addr(), margin, redislock.WithWait(0))
	// One attempt: one dial, which go-redis's pool repeats DialerRetries times by itself.
	if n, one := counted.n.Load()-before, int64(c.Options().DialerRetries); n > one {
		t.Fatalf("%d dials after the server stopped, want at most %d (one attempt)", n, one)
	}
}

// Rule 14: a guarded write left unanswered by a frozen server is unavailable within the bound,
// and the goroutine that sent it ends soon after, even when the application's client never
// times out a read (ReadTimeout -1): nothing outlives the bound by more than a read of it.
func TestAnUnansweredGuardDoesNotOutliveTheBound(t *testing.T) {
	defer func(current goleak.Option) {
		// Gives it 3 s; the client's own goroutines live until it is closed, after this.
		if err := leaked(current, goleak.IgnoreTopFunction(
			"github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop")); err != nil {
			t.Error(err)
		}
	}(goleak.IgnoreCurrent())
	s := server(t)
	c := client(t, s, func(o *redis.Options) { o.ReadTimeout = -1 })
	l := redislock.New(c, redislock.WithUnavailableAfter(bound))
	lock := obtain(t, l, "k", time.Minute, redislock.WithWatchdog(false))
	s.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { s.Signal(syscall.SIGCONT) }) // after the goroutines are counted
	started := time.Now()
	if err := lock.Guard(ctx, "SET", "x", "1").Err(); !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Guard: %v", err)
	}
	if took := time.Since(started); took > bound+margin {
		t.Fatalf("Guard took %v", took)
	}
}
