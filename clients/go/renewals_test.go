package redislock_test

// Rule 6: one renewal loop per Locker, on one connection of its own per server, renews any
// number of holds; releasing or losing one leaves the others renewed (rule 7).

import (
	"fmt"
	"strconv"
	"strings"
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
