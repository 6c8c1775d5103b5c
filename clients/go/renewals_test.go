package redislock_test

// Rule 6: one renewal loop per Locker, on one connection of its own per server, renews any
// number of holds; releasing or losing one leaves the others renewed (rule 7).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

// Rule 6: 1,000 holds of 6 s held 13 s on one Locker add one connection to the server (the
// loop's), and none is lost; then one released and one lost (released by another connection)
// leave the 998 others renewed: their leases were extended after that.
func TestOneLoopRenews1000HoldsOnOneConnection(t *testing.T) {
	s := server(t)
	app := client(t, s)     // the application's client: its pool stays at one connection
	watcher := client(t, s) // INFO and the force release, on a connection of its own
	clients := func() int {
		n, err := strconv.Atoi(testserver.Info(ctx, watcher, "clients", "connected_clients"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	app.Ping(ctx)
	before, pool := clients(), app.PoolStats().TotalConns
	l := redislock.New(app)
	// Renewed every 2 s: a renewal may come 4 s late before a lease ends (Java and Python lost
	// holds with 3 s leases when a loaded 2-core machine stalled them more than 2 s).
	const n, ttl = 1000, 6 * time.Second
	holds := make([]*redislock.Lock, n)
	for i := range holds {
		holds[i] = obtain(t, l, fmt.Sprintf("renew:%d", i), ttl, redislock.WithWait(0))
	}
	most := before
	for end := time.Now().Add(2*ttl + time.Second); time.Now().Before(end); { // two leases and more
		time.Sleep(250 * time.Millisecond)
		most = max(most, clients())
	}
	grown := int(app.PoolStats().TotalConns - pool)
	// The loop's one connection, and 1 of margin (a sample taken while a broken link is made
	// again); the pool's own growth is the application's.
	if most-before > 2+grown {
		t.Fatalf("connected_clients %d before, up to %d with %d holds (pool grew by %d)", before, most, n, grown)
	}
	for _, h := range holds {
		if err := h.Err(); err != nil {
			t.Fatalf("lost: %v", err)
		}
	}
	t.Logf("connected_clients %d before, up to %d with %d holds", before, most, n)

	release(t, holds[0], true)
	gone := holds[1]
	if err := watcher.Do(ctx, "LOCK.RELEASE", gone.Key(), gone.Owner()).Err(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	select {
	case <-gone.Lost(): // its next renewal, within ttl/3, answers 0
	case <-time.After(ttl + time.Second): // 2 s of margin on that renewal
		t.Fatal("the released-elsewhere hold is not reported lost")
	}
	time.Sleep(2 * ttl / 3) // two renewal intervals
	for _, h := range holds[2:] {
		asked := time.Now()
		left, _ := info(t, watcher, h.Key())["ttl"].(int64)
		// Renewed after the cut: its lease ends later than one that began at the cut.
		if ms := (ttl - asked.Sub(cut)).Milliseconds(); h.Err() != nil || left <= ms {
			t.Fatalf("%s: %d ms left, want more than %d (renewed after the loss of another): %v",
				h.Key(), left, ms, h.Err())
		}
	}
	for _, h := range holds[2:] {
		release(t, h, true)
	}
}

// Rule 6 and the reasons of rule 8: a session hold renews on its own connection (not the
// loop's); when that connection breaks the hold is lost, "the session's connection closed".
func TestASessionHoldRenewsOnItsOwnConnection(t *testing.T) {
	r := client(t, server(t))
	lock := obtain(t, redislock.New(r), "s", 1500*time.Millisecond, redislock.WithSession()) // renewals every 500 ms
	holders := info(t, r, "s")["holders"].([]any)
	session, _ := asMap(holders[0])["session"].(int64)
	eventually(t, 3*time.Second, "a renewal on the session's connection", func() bool {
		for _, line := range strings.Split(r.ClientList(ctx).Val(), "\n") {
			if parseID(line) == session && strings.Contains(line, "cmd=lock.extend") {
				return true
			}
		}
		return false
	})
	if err := r.ClientKillByFilter(ctx, "ID", itoa(session)).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lock.Lost():
	case <-time.After(3 * time.Second): // the next renewal within 500 ms; 2.5 s for load
		t.Fatal("not reported lost")
	}
	t.Logf("%v", lock.Err())
	if err := lock.Err(); !strings.Contains(err.Error(), ": the session's connection closed: ") {
		t.Fatalf("Err: %v", err)
	}
	release(t, lock, false)
}

// Rules 15 and 20: an extend never crosses a renewal of its hold. The proxy holds the first
// renewal (ttl 1 s) for 400 ms; Extend(10 s) is called meanwhile. The held renewal must reach
// the server before the extend (else it runs after it and sets 1 s again, behind the client's
// back), and the lease must then be the extend's: 1.5 s after the held renewal ran, the lock
// is still held with more than 5 s left, and the hold is not lost. The proxy also passes the
// extend's reply on only after the renewal's (the order the review found: the client then
// takes the renewal's reply first, with nothing telling it stale).
func TestAnExtendWaitsForARenewalSentWithTheOldTTL(t *testing.T) {
	s := server(t)
	r := client(t, s)
	proxy := holdsOldRenewal(t, s.Addr(), "1000", "10000", 400*time.Millisecond)
	lock := obtain(t, lockerAt(t, proxy.addr), "k", time.Second) // renewed every 333 ms
	select {
	case <-proxy.holding:
	case <-time.After(3 * time.Second): // the first renewal is 333 ms away; 2.7 s for load
		t.Fatal("no renewal held")
	}
	extended := make(chan error, 1)
	go func() {
		ok, err := lock.Extend(ctx, 10*time.Second)
		if err == nil && !ok {
			err = errors.New("Extend answered false")
		}
		extended <- err
	}()
	select {
	case err := <-extended:
		if err != nil {
			t.Fatalf("Extend: %v", err)
		}
	case <-time.After(bound + margin): // the wait and the extend are within the bound
		t.Fatal("Extend did not return")
	}
	renewal, extend, ok := proxy.order()
	if !ok || renewal >= extend {
		t.Fatalf("LOCK.EXTENDs forwarded (ttl, connection): %v; want the held 1000 before the extend's 10000",
			proxy.forwarded())
	}
	// The held renewal's 1 s lease would end 1 s after it was forwarded: 500 ms past that, for
	// the server's clock and a late sample.
	time.Sleep(time.Until(proxy.at(renewal).Add(1500 * time.Millisecond)))
	left, _ := info(t, r, "k")["ttl"].(int64)
	// The extend's 10 s began after the renewal was forwarded: 8.5 s are left, 3.5 s of
	// margin for a stalled machine over 5 s (a 1 s lease has at most 1 s).
	if left <= 5000 || lock.Err() != nil {
		t.Fatalf("LOCK.INFO ttl %d ms 1.5 s after the held renewal ran, want more than 5000; Err %v",
			left, lock.Err())
	}
	release(t, lock, true)
}

// Rules 15 and 20: the extends of one hold go one at a time. Extend(10 s) of a fixed 30 s lease
// runs on the server but its reply is held 500 ms; Extend(1 s), called once the server shows
// the 10 s lease, is sent after that reply (sent at once on another connection, it would run
// after the 10 s one, be answered first, and the late 10 s answer would set the client's end
// 9 s past the server's). Both answer true; once the server has freed the lock (1 s after the
// second extend ran), the client reports the hold lost within 1 s. The same for a 2-key set.
func TestExtendsOfOneHoldGoOneAtATime(t *testing.T) {
	for _, keys := range [][]string{{"k"}, {"a", "b"}} {
		t.Run(strings.Join(keys, ","), func(t *testing.T) {
			s := server(t)
			r := client(t, s)
			proxy := holdsReply(t, s.Addr(), "10000", 500*time.Millisecond)
			l := lockerAt(t, proxy.addr)
			var (
				extend func(time.Duration) (bool, error)
				lost   <-chan struct{}
				err    func() error
			)
			if len(keys) == 1 {
				lock := obtain(t, l, keys[0], 30*time.Second, redislock.WithWatchdog(false))
				extend = func(ttl time.Duration) (bool, error) { return lock.Extend(ctx, ttl) }
				lost, err = lock.Lost(), lock.Err
			} else {
				set := obtainAll(t, l, keys, 30*time.Second, redislock.WithWatchdog(false))
				extend = func(ttl time.Duration) (bool, error) { return set.Extend(ctx, ttl) }
				lost, err = set.Lost(), set.Err
			}
			first := make(chan error, 1)
			go func() {
				ok, err := extend(10 * time.Second)
				if err == nil && !ok {
					err = errors.New("Extend(10 s) answered false")
				}
				first <- err
			}()
			// It ran: the server's lease ends within 10 s, no longer 30 s (its reply is held).
			eventually(t, 3*time.Second, "the 10 s extend runs", func() bool {
				for _, key := range keys {
					left, _ := info(t, r, key)["ttl"].(int64)
					if left <= 5000 || left > 10000 {
						return false
					}
				}
				return true
			})
			if ok, err := extend(time.Second); !ok || err != nil {
				t.Fatalf("Extend(1 s) = %v, %v; want true", ok, err)
			}
			select {
			case err := <-first:
				if err != nil {
					t.Fatalf("Extend(10 s): %v", err)
				}
			case <-time.After(bound + margin): // it returns within the bound
				t.Fatal("Extend(10 s) did not return")
			}
			// The server frees the keys 1 s after the second extend ran (5 s: a loaded machine).
			eventually(t, 5*time.Second, "the server frees the lock", func() bool {
				for _, key := range keys {
					if info(t, r, key) != nil {
						return false
					}
				}
				return true
			})
			select {
			case <-lost:
				t.Logf("lost: %v", err())
			case <-time.After(time.Second): // a timer 1 s late on a loaded machine
				t.Fatalf("the server freed the lock; 1 s later the client still holds it (Err %v)", err())
			}
		})
	}
}

// Rule 20: an extend waits for its turn no longer than its bound (here its context's 100 ms):
// while an earlier extend's reply is held 800 ms, Extend(1 s) is unavailable with nothing
// sent: the server's lease is then the earlier extend's 10 s, and the hold is live.
func TestAnExtendWaitingForItsTurnPastItsDeadlineSendsNothing(t *testing.T) {
	s := server(t)
	r := client(t, s)
	proxy := holdsReply(t, s.Addr(), "10000", 800*time.Millisecond)
	lock := obtain(t, lockerAt(t, proxy.addr), "k", 30*time.Second, redislock.WithWatchdog(false))
	first := make(chan error, 1)
	go func() {
		_, err := lock.Extend(ctx, 10*time.Second)
		first <- err
	}()
	select {
	case <-proxy.holding:
	case <-time.After(3 * time.Second): // at once; 3 s for a loaded machine
		t.Fatal("the 10 s extend is not sent")
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if ok, err := lock.Extend(short, time.Second); ok || !errors.Is(err, redislock.ErrUnavailable) {
		t.Fatalf("Extend(1 s) = %v, %v; want false, ErrUnavailable", ok, err)
	} else {
		t.Logf("Extend(1 s): %v", err)
	}
	select {
	case <-first:
	case <-time.After(bound + margin): // it returns within the bound
		t.Fatal("Extend(10 s) did not return")
	}
	// The 1 s extend did not run: the lease is the 10 s one (more than 5 s left, 4 s of margin
	// for a loaded machine), and the client still holds it.
	if left, _ := info(t, r, "k")["ttl"].(int64); left <= 5000 || left > 10000 || lock.Err() != nil {
		t.Fatalf("LOCK.INFO ttl %d ms, want in (5000, 10000]; Err %v", left, lock.Err())
	}
	release(t, lock, true)
}

// A renewalHolder is a TCP proxy of the test to a server (see holdsOldRenewal, holdsReply).
type renewalHolder struct {
	addr, to, old, new string
	hold               time.Duration
	reply              bool          // holdsReply's: the held command goes at once, its reply waits
	holding            chan struct{} // closed when the old-ttl renewal is held
	answered           chan struct{} // closed once the server's reply to it has been passed on
	once               sync.Once
	mu                 sync.Mutex
	log                []extendSeen // the LOCK.EXTENDs forwarded to the server, in order
	conns              int
}

// An extendSeen is one LOCK.EXTEND forwarded to the server.
type extendSeen struct {
	ttl  string // its ttl argument, in ms
	conn int    // its client connection, by the order they were accepted
	held bool   // the held one
	at   time.Time
}

// holdsOldRenewal is a TCP proxy of the test to the server at to that forwards everything,
// except the first chunk carrying a LOCK.EXTEND with ttl old (ms): it holds it for hold, then
// forwards it. A reply to a LOCK.EXTEND with ttl new on another connection is passed on only
// once the held one's has been (and 50 ms more: the client reads that one first).
func holdsOldRenewal(t *testing.T, to, old, new string, hold time.Duration) *renewalHolder {
	p := &renewalHolder{to: to, old: old, new: new, hold: hold,
		holding: make(chan struct{}), answered: make(chan struct{})}
	p.addr = service(t, p.relay)
	return p
}

// holdsReply is a TCP proxy of the test to the server at to that forwards everything at once,
// but holds the reply to the first LOCK.EXTEND with ttl ttl (ms) for hold before passing it on
// (the command runs on the server, its answer is late).
func holdsReply(t *testing.T, to, ttl string, hold time.Duration) *renewalHolder {
	p := &renewalHolder{to: to, old: ttl, hold: hold, reply: true,
		holding: make(chan struct{}), answered: make(chan struct{})}
	p.addr = service(t, p.relay)
	return p
}

// relay forwards one client connection's commands, holding the old-ttl renewal.
func (p *renewalHolder) relay(c net.Conn) {
	s, err := net.Dial("tcp", p.to)
	if err != nil {
		return
	}
	defer s.Close()
	p.mu.Lock()
	p.conns++
	id := p.conns
	p.mu.Unlock()
	var held, extending atomic.Bool // this connection's: the held renewal, an extend sent
	go p.replies(s, c, &held, &extending)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		ttls := extendTTLs(buf[:n])
		holdIt := false
		if slices.Contains(ttls, p.old) {
			p.once.Do(func() { holdIt = true })
		}
		if holdIt {
			held.Store(true)
			close(p.holding)
			if !p.reply {
				time.Sleep(p.hold)
			}
		} else if p.new != "" && slices.Contains(ttls, p.new) && !held.Load() {
			extending.Store(true)
		}
		if _, err := s.Write(buf[:n]); err != nil {
			return
		}
		p.note(ttls, id, holdIt)
	}
}

// replies passes the server's replies on to the client: after the held renewal's, the first
// one closes answered; an extend's waits for that (2 s at most: the proxy never hangs). In
// holdsReply's mode, the held command's reply waits hold first.
func (p *renewalHolder) replies(s, c net.Conn, held, extending *atomic.Bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if err != nil {
			return
		}
		if p.reply && held.Load() {
			time.Sleep(p.hold)
		}
		if extending.CompareAndSwap(true, false) {
			select {
			case <-p.answered:
				time.Sleep(50 * time.Millisecond)
			case <-time.After(2 * time.Second):
			}
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
		if held.CompareAndSwap(true, false) {
			close(p.answered)
		}
	}
}

func (p *renewalHolder) note(ttls []string, conn int, held bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ttl := range ttls {
		p.log = append(p.log, extendSeen{ttl: ttl, conn: conn, held: held && ttl == p.old, at: time.Now()})
	}
}

// order is where the held renewal and the first new-ttl LOCK.EXTEND of another connection
// (the extend's) are in the log; ok false when either is missing.
func (p *renewalHolder) order() (renewal, extend int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	renewal, extend = -1, -1
	for i, e := range p.log {
		if e.held {
			renewal = i
		}
	}
	for i, e := range p.log {
		if renewal >= 0 && e.ttl == p.new && e.conn != p.log[renewal].conn {
			extend = i
			break
		}
	}
	return renewal, extend, renewal >= 0 && extend >= 0
}

func (p *renewalHolder) at(i int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log[i].at
}

func (p *renewalHolder) forwarded() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, e := range p.log {
		out = append(out, fmt.Sprintf("(%s, %d)", e.ttl, e.conn))
	}
	return strings.Join(out, " ")
}

// extendTTLs is the ttl argument of each LOCK.EXTEND in a chunk of RESP commands (the third
// bulk string after the name: key, owner, ttl).
func extendTTLs(chunk []byte) []string {
	var ttls []string
	for rest := chunk; ; {
		i := bytes.Index(rest, []byte("LOCK.EXTEND\r\n"))
		if i < 0 {
			return ttls
		}
		rest = rest[i+len("LOCK.EXTEND\r\n"):]
		var arg []byte
		for range 3 {
			arg, rest = bulk(rest)
		}
		ttls = append(ttls, string(arg))
	}
}

// bulk reads one RESP bulk string ($n\r\nbytes\r\n) from b: it and the rest.
func bulk(b []byte) ([]byte, []byte) {
	head, body, ok := bytes.Cut(b, []byte("\r\n"))
	n, err := strconv.Atoi(strings.TrimPrefix(string(head), "$"))
	if !ok || err != nil || n < 0 || n+2 > len(body) {
		return nil, nil
	}
	return body[:n], body[n+2:]
}
