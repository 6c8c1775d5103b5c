package redislock_test

// One test (or more) per rule of docs/clients.md, each on a server of its own; the rule's
// number is in the test's comment.

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

var ctx = context.Background()

// obtain takes a lock or fails the test.
func obtain(t testing.TB, l *redislock.Locker, key string, ttl time.Duration, opts ...redislock.Option) *redislock.Lock {
	t.Helper()
	lock, err := l.Obtain(ctx, key, ttl, opts...)
	if err != nil {
		t.Fatalf("Obtain %s: %v", key, err)
	}
	return lock
}

// release releases lock and fails the test unless Release reports want.
func release(t testing.TB, lock *redislock.Lock, want bool) {
	t.Helper()
	got, err := lock.Release(ctx)
	if err != nil || got != want {
		t.Fatalf("Release %s = %v, %v; want %v", lock.Key(), got, err, want)
	}
}

type result struct {
	lock *redislock.Lock
	err  error
}

// obtainAsync runs Obtain in a goroutine.
func obtainAsync(ctx context.Context, l *redislock.Locker, key string, ttl time.Duration, opts ...redislock.Option) <-chan result {
	out := make(chan result, 1)
	go func() {
		lock, err := l.Obtain(ctx, key, ttl, opts...)
		out <- result{lock, err}
	}()
	return out
}

func await(t testing.TB, ch <-chan result, limit time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("Obtain did not return within %v", limit)
		return result{}
	}
}

// Rules 5 and 7: a hold has its token; Release frees it and says it was live, once.
func TestObtainGivesATokenAndReleaseFreesTheLock(t *testing.T) {
	r := client(t, server(t))
	lock := obtain(t, redislock.New(r), "order:42", 5*time.Second)
	if lock.Token() <= 0 || fence(r, "order:42") != lock.Token() {
		t.Fatalf("token %d, the server's %d", lock.Token(), fence(r, "order:42"))
	}
	if lock.Key() != "order:42" || lock.Err() != nil {
		t.Fatalf("key %q, err %v", lock.Key(), lock.Err())
	}
	release(t, lock, true)
	if n := r.Exists(ctx, "order:42").Val(); n != 0 {
		t.Fatal("still held after Release")
	}
	release(t, lock, false) // twice: nothing more
	if lock.Err() != nil {
		t.Fatalf("a released hold is not lost: %v", lock.Err())
	}
	select {
	case <-lock.Lost():
		t.Fatal("Lost closed by Release")
	default:
	}
}

var uuid = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Rule 1: every Obtain has a fresh random owner unless the caller gives one; the same owner
// asking again is a retry (the same token).
func TestEachObtainHasAFreshOwner(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	a, b := obtain(t, l, "a", 5*time.Second), obtain(t, l, "b", 5*time.Second)
	if a.Owner() == b.Owner() || !uuid.MatchString(a.Owner()) || !uuid.MatchString(b.Owner()) {
		t.Fatalf("owners %q and %q", a.Owner(), b.Owner())
	}
	if _, err := l.Obtain(ctx, "a", time.Second, redislock.WithWait(0)); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("another owner got a held lock: %v", err)
	}
	mine := obtain(t, l, "c", 5*time.Second, redislock.WithOwner("worker-7"))
	again := obtain(t, l, "c", 5*time.Second, redislock.WithOwner("worker-7"), redislock.WithWatchdog(false))
	if info(t, r, "c")["owner"] != "worker-7" || again.Token() != mine.Token() {
		t.Fatalf("owner %v, tokens %d and %d", info(t, r, "c")["owner"], mine.Token(), again.Token())
	}
	release(t, a, true)
	release(t, b, true)
	release(t, mine, true)
	release(t, again, false)
}

// Rule 2: a wait is one blocking LOCK.ACQUIRE ... WAIT in the server's queue, no polling.
func TestWaitsInTheServersQueueWithoutPolling(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	first := obtain(t, l, "job", 5*time.Second)
	waiting := obtainAsync(ctx, l, "job", 5*time.Second)
	eventually(t, 2*time.Second, "the waiter is blocked", func() bool { return blocked(r) == "1" })
	time.Sleep(300 * time.Millisecond)
	release(t, first, true)
	got := await(t, waiting, 5*time.Second)
	if got.err != nil || got.lock.Token() <= first.Token() {
		t.Fatalf("waiter: %v", got.err)
	}
	if n := calls(r, "lock.acquire"); n != 2 {
		t.Fatalf("%d LOCK.ACQUIRE calls, want 2 (one blocking call each)", n)
	}
	if queue := info(t, r, "job")["owner"]; queue != got.lock.Owner() {
		t.Fatalf("holder %v", queue)
	}
	release(t, got.lock, true)
}

// Rule 2: the client's read timeout never cuts a wait short.
func TestAShortReadTimeoutDoesNotCutAWait(t *testing.T) {
	s := server(t)
	impatient := client(t, s, func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond })
	holder := obtain(t, redislock.New(client(t, s)), "slow", 5*time.Second)
	time.AfterFunc(time.Second, func() { _, _ = holder.Release(ctx) })
	started := time.Now()
	lock, err := redislock.New(impatient).Obtain(ctx, "slow", 5*time.Second, redislock.WithWait(5*time.Second))
	if err != nil || time.Since(started) < 900*time.Millisecond {
		t.Fatalf("after %v: %v", time.Since(started), err)
	}
	release(t, lock, true)
}

// Rule 2 and the errors: not granted is ErrNotObtained (with the context's error when the
// context ended the wait); the server's other answers are errors of their own.
func TestNotObtainedAndRealErrors(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	holder := obtain(t, l, "held", 30*time.Second)

	// WithWait(0) is one try: one LOCK.ACQUIRE, answered at once. The 1 s bound is far from a
	// loopback round trip (a few ms) to cover a descheduled goroutine, and far below a wait
	// (the holder's lease is 30 s).
	asked := calls(r, "lock.acquire")
	started := time.Now()
	_, err := l.Obtain(ctx, "held", time.Second, redislock.WithWait(0))
	if took := time.Since(started); !errors.Is(err, redislock.ErrNotObtained) || took > time.Second {
		t.Fatalf("WithWait(0): %v after %v", err, took)
	}
	if n := calls(r, "lock.acquire") - asked; n != 1 {
		t.Fatalf("WithWait(0) asked %d times, want once", n)
	}
	started = time.Now()
	_, err = l.Obtain(ctx, "held", time.Second, redislock.WithWait(300*time.Millisecond))
	if took := time.Since(started); !errors.Is(err, redislock.ErrNotObtained) || took < 290*time.Millisecond || took > 2*time.Second {
		t.Fatalf("WithWait(300ms): %v after %v", err, took)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = l.Obtain(short, "held", time.Second)
	if !errors.Is(err, redislock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || short.Err() == nil {
		t.Fatalf("a context deadline: %v, returned before the context ended: %v", err, short.Err() == nil)
	}

	r.RPush(ctx, "list", "x")
	_, err = l.Obtain(ctx, "list", time.Second, redislock.WithWait(0))
	if err == nil || errors.Is(err, redislock.ErrNotObtained) || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Fatalf("a list under the name: %v", err)
	}
	_, err = l.Obtain(ctx, "list", time.Second, redislock.WithWait(time.Second))
	if err == nil || errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a list under the name, waiting: %v", err)
	}

	x := obtain(t, l, "doc", 5*time.Second, redislock.WithShared(), redislock.WithOwner("x"))
	y := obtain(t, l, "doc", 5*time.Second, redislock.WithShared())
	_, err = l.Obtain(ctx, "doc", 5*time.Second, redislock.WithOwner("x"), redislock.WithWait(0))
	var reply redis.Error
	if !errors.Is(err, redislock.ErrDeadlock) || !errors.As(err, &reply) {
		t.Fatalf("an upgrade beside another reader: %v", err)
	}

	for _, bad := range [][]redislock.Option{
		{redislock.WithPermits(2, 3)},
		{redislock.WithShared(), redislock.WithPermits(2, 1)},
	} {
		if _, err := l.Obtain(ctx, "k", time.Second, bad...); err == nil {
			t.Fatal("bad options accepted")
		}
	}
	if _, err := l.Obtain(ctx, "k", 0); err == nil {
		t.Fatal("a ttl of 0 accepted")
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": r.Options().Addr}})
	defer ring.Close()
	if _, err := redislock.New(ring).Obtain(ctx, "k", time.Second); err == nil || errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a wait through a Ring: %v", err)
	}
	release(t, x, true)
	release(t, y, true)
	release(t, holder, true)
}

// Rule 3: cancelling the context closes the waiting connection, which takes it out of the
// server's queue; a later release grants nobody, and the client's pool is untouched.
func TestCancellingTheContextLeavesTheQueue(t *testing.T) {
	r := client(t, server(t), func(o *redis.Options) { o.PoolSize = 2 })
	l := redislock.New(r)
	holder := obtain(t, l, "h", 10*time.Second)
	for range 5 {
		waitCtx, cancel := context.WithCancel(ctx)
		waiting := obtainAsync(waitCtx, l, "h", 5*time.Second)
		eventually(t, 2*time.Second, "queued", func() bool { return waiters(t, r, "h") == 1 })
		cancel()
		got := await(t, waiting, 2*time.Second)
		if !errors.Is(got.err, context.Canceled) || !errors.Is(got.err, redislock.ErrNotObtained) {
			t.Fatalf("a cancelled wait: %v", got.err)
		}
		eventually(t, 2*time.Second, "the waiter left the queue", func() bool { return waiters(t, r, "h") == 0 })
	}
	if stats := r.PoolStats(); stats.TotalConns > 2 {
		t.Fatalf("pool: %+v", stats)
	}
	release(t, holder, true)
	if r.Exists(ctx, "h").Val() != 0 {
		t.Fatalf("the release granted a cancelled waiter: %v", info(t, r, "h"))
	}
	lock := obtain(t, l, "h", 5*time.Second, redislock.WithWait(0))
	release(t, lock, true)
}

// Rule 3, the other half: a wait whose reply came leaves a clean connection (the server can no
// longer grant to it), kept for the next wait; Close closes the kept ones.
func TestAnAnsweredWaitsConnectionIsKeptForTheNext(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	connections := func() string {
		return testserver.Info(ctx, r, "stats", "total_connections_received")
	}
	release(t, obtain(t, l, "k", time.Second), true)
	before := connections()
	for range 5 {
		release(t, obtain(t, l, "k", time.Second), true)
		_, err := l.Obtain(ctx, "busy", time.Second, redislock.WithOwner("x"), redislock.WithWait(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Obtain(ctx, "busy", time.Second, redislock.WithWait(10*time.Millisecond))
		if !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatal(err)
		}
	}
	if after := connections(); after != before {
		t.Fatalf("connections received: %s before, %s after 15 waits", before, after)
	}
	connected := func() int {
		n, _ := strconv.Atoi(testserver.Info(ctx, r, "clients", "connected_clients"))
		return n
	}
	clients := connected()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "the kept connection is closed", func() bool { return connected() == clients-1 })
}

// Rule 4: a connection error while waiting is asked again with the same owner.
func TestAConnectionErrorWhileWaitingIsRetriedWithTheSameOwner(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	holder := obtain(t, l, "retry", 5*time.Second)
	waiting := obtainAsync(ctx, l, "retry", 5*time.Second, redislock.WithOwner("waiter-1"))
	eventually(t, 2*time.Second, "queued", func() bool { return waiters(t, r, "retry") == 1 })
	// The waiter's link breaks (and the holder's watchdog's: it reconnects).
	if err := r.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "it waits again", func() bool { return waiters(t, r, "retry") == 1 })
	if q := info(t, r, "retry")["queue"].([]any); q[0] != "waiter-1" {
		t.Fatalf("queue %v", q)
	}
	release(t, holder, true)
	got := await(t, waiting, 5*time.Second)
	if got.err != nil || fence(r, "retry") != got.lock.Token() || info(t, r, "retry")["owner"] != "waiter-1" {
		t.Fatalf("waiter: %v", got.err)
	}
	release(t, got.lock, true)
}

// Rule 5: guarded writes run only while the token is the live exclusive hold's.
func TestGuardWritesOnlyWhileHeld(t *testing.T) {
	r := client(t, server(t))
	r.Set(ctx, "{sku:9}:stock", 10, 0)
	// A fixed lease that outlives the test: the token goes stale by a force release, which
	// the client does not know of (a lease's end it knows: TestAFixedLeaseIsLostAtItsEnd), so
	// the server refuses the write.
	lock := obtain(t, redislock.New(r), "{sku:9}:lock", time.Minute, redislock.WithWatchdog(false))
	if left, err := lock.Guard(ctx, "DECRBY", "{sku:9}:stock", 1).Int64(); err != nil || left != 9 {
		t.Fatalf("guarded DECRBY: %d, %v", left, err)
	}
	r.Do(ctx, "LOCK.FORCERELEASE", "{sku:9}:lock")
	err := lock.Guard(ctx, "DECRBY", "{sku:9}:stock", 1).Err()
	var reply redis.Error
	if !errors.Is(err, redislock.ErrStale) || !errors.As(err, &reply) || !strings.HasPrefix(reply.Error(), "STALE") {
		t.Fatalf("a guarded write of a stale token: %v", err)
	}
	if v := r.Get(ctx, "{sku:9}:stock").Val(); v != "9" {
		t.Fatalf("stock %s", v)
	}
	release(t, lock, false)
	if err := lock.Guard(ctx, "GET", "{sku:9}:stock").Err(); !errors.Is(err, redislock.ErrStale) {
		t.Fatalf("after release: %v", err)
	}
}

// Rules 6 and 7: the watchdog keeps a hold past three leases, renewing every ttl/3; the
// release stops it in the same step: no renewal after it, no goroutine left.
func TestTheWatchdogHoldsPastThreeLeasesAndNeverRenewsAfterRelease(t *testing.T) {
	defer func(current goleak.Option) {
		if err := leaked(current); err != nil {
			t.Error(err)
		}
	}(goleak.IgnoreCurrent())
	r := client(t, server(t))
	r.ConfigResetStat(ctx)
	l := redislock.New(r)
	// A 1.5 s lease: a renewal every 500 ms, each with 1 s of slack before the lease would
	// end, which a late timer on a loaded machine does not eat. Three leases (4.5 s) rather
	// than ten keep the test short; without renewals the hold would end after the first.
	ttl := 1500 * time.Millisecond
	lock := obtain(t, l, "w", ttl)
	other := obtainAsync(ctx, redislock.New(r), "w", time.Second, redislock.WithWait(3*ttl-time.Second))
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		if fence(r, "w") != lock.Token() {
			t.Fatalf("lost the hold at %v: %v", lock.Token(), lock.Err())
		}
	}
	if got := await(t, other, 2*time.Second); !errors.Is(got.err, redislock.ErrNotObtained) {
		t.Fatalf("a waiter got a watched hold: %v", got.err)
	}
	// The hold outliving three leases is the renewals' outcome; how many there were is the
	// scheduler's. Rule 7 says none comes after the release has returned (a renewal already
	// on its way when the release began may land before it).
	release(t, lock, true)
	after := calls(r, "lock.extend")
	time.Sleep(time.Second) // two renewal periods: a renewal the release did not stop would show
	if n := calls(r, "lock.extend"); n != after {
		t.Fatalf("renewals: %d when the release returned, %d a second later", after, n)
	}
	select {
	case <-lock.Lost():
		t.Fatal("reported lost")
	default:
	}
}

// Rule 6: the watchdog renews on a connection of its own: a pool of one, busy for longer than
// the lease, does not starve it.
func TestTheWatchdogRenewsOnAConnectionOfItsOwn(t *testing.T) {
	s := server(t)
	r := client(t, s, func(o *redis.Options) { o.PoolSize = 1; o.PoolTimeout = 5 * time.Second })
	// A 1.5 s lease: renewals every 500 ms with 1 s of slack each.
	ttl := 1500 * time.Millisecond
	lock := obtain(t, redislock.New(r), "k", ttl)
	busy := make(chan error, 1)
	go func() { busy <- r.BLPop(ctx, ttl+time.Second, "nothing").Err() }() // the pool's one connection
	watcher := client(t, s)
	eventually(t, 2*time.Second, "the pool's connection is busy", func() bool { return blocked(watcher) == "1" })
	// Sampled for the lease and 500 ms more while the pool stays busy (the BLPOP lasts 500 ms
	// longer still): a watchdog waiting for the pool would let the lease end, which LOCK.FENCE
	// says at once.
	for end := time.Now().Add(ttl + 500*time.Millisecond); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		if fence(watcher, "k") != lock.Token() {
			t.Fatalf("the hold ran out while the pool was busy: %v", lock.Err())
		}
	}
	if err := <-busy; err != redis.Nil {
		t.Fatal(err)
	}
	release(t, lock, true)
}

// Rule 6: without the watchdog the lease is fixed.
func TestWithoutTheWatchdogTheLeaseIsFixed(t *testing.T) {
	r := client(t, server(t))
	lock := obtain(t, redislock.New(r), "w", 200*time.Millisecond, redislock.WithWatchdog(false))
	// The server removes the lock when its timer fires, which a loaded machine may delay.
	eventually(t, 3*time.Second, "the lease ends", func() bool { return r.Exists(ctx, "w").Val() == 0 })
	if n := calls(r, "lock.extend"); n != 0 {
		t.Fatalf("renewed %d times", n)
	}
	release(t, lock, false)
}

// Rule 8: a force release is noticed by the next renewal: Lost closes before the lease would
// have ended, Err says why, guarded writes are stale and Release reports false.
func TestLostClosesAtTheNextRenewalAfterAForceRelease(t *testing.T) {
	r := client(t, server(t))
	ttl := 3 * time.Second
	lock := obtain(t, redislock.New(r), "w", ttl)
	// Forced at once: the first renewal, 1 s after the grant, finds the hold gone; the lease
	// would end 3 s after it. The bound below, ttl - 500 ms, leaves that renewal 1.5 s for a
	// late timer, and a loss noticed only at the lease's end exceeds it.
	r.Do(ctx, "LOCK.FORCERELEASE", "w")
	forced := time.Now()
	select {
	case <-lock.Lost():
	case <-time.After(ttl - 500*time.Millisecond):
		t.Fatalf("Lost not closed by the next renewal (every %v), within %v", ttl/3, ttl-500*time.Millisecond)
	}
	took := time.Since(forced)
	err := lock.Err()
	if !errors.Is(err, redislock.ErrLost) || !strings.Contains(err.Error(), "ran out") {
		t.Fatalf("Err: %v", err)
	}
	if err := lock.Guard(ctx, "SET", "x", 1).Err(); !errors.Is(err, redislock.ErrStale) || !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("Guard: %v", err)
	}
	release(t, lock, false)
	if !errors.Is(lock.Err(), redislock.ErrLost) {
		t.Fatal("the loss is forgotten by Release")
	}
	t.Logf("lost %v after the force release (renewal period %v)", took, ttl/3)
}

// Rule 8: a watchdog that cannot reach the server before the lease ends loses the hold.
func TestAWatchdogThatCannotReachTheServerLosesTheHold(t *testing.T) {
	r := client(t, server(t))
	// A 1.5 s lease: renewals every 500 ms with 1 s of slack each, so none is late enough to
	// find the hold gone (lost for another reason) before the link is cut.
	ttl := 1500 * time.Millisecond
	lock := obtain(t, redislock.New(r), "k", ttl)
	eventually(t, 3*time.Second, "a renewal", func() bool { return calls(r, "lock.extend") >= 1 })
	r.ConfigSet(ctx, "maxclients", "1") // the server refuses every new connection
	defer r.ConfigSet(ctx, "maxclients", "10000")
	var id int64
	for _, line := range strings.Split(r.ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, "cmd=lock.extend") {
			id = parseID(line)
		}
	}
	if id == 0 || r.ClientKillByFilter(ctx, "ID", itoa(id)).Err() != nil {
		t.Fatal("no watchdog connection to kill")
	}
	select {
	case <-lock.Lost():
	case <-time.After(ttl + 2*time.Second): // the lease ends within ttl; 2 s for late timers
		t.Fatal("not reported lost")
	}
	if err := lock.Err(); !strings.Contains(err.Error(), "could not be reached") {
		t.Fatalf("Err: %v", err)
	}
	r.ConfigSet(ctx, "maxclients", "10000")
	release(t, lock, false)
}

// Rule 8: any other failure of a renewal (here the user may not run LOCK.EXTEND) loses the
// hold at once, not at the end of the lease.
func TestARefusedRenewalLosesTheHoldAtOnce(t *testing.T) {
	s := server(t)
	admin := client(t, s)
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-lock.extend").Err(); err != nil {
		t.Fatal(err)
	}
	app := client(t, s, func(o *redis.Options) { o.Username, o.Password = "app", "secret" })
	ttl := 3 * time.Second
	lock := obtain(t, redislock.New(app), "k", ttl)
	started := time.Now()
	// The first renewal, 1 s in, is refused: lost then. The bound, ttl - 500 ms, leaves it
	// 1.5 s for a late timer; a loss noticed only at the lease's end (3 s) exceeds it.
	select {
	case <-lock.Lost():
	case <-time.After(ttl - 500*time.Millisecond):
		t.Fatalf("not reported lost within %v: the first renewal (after %v) was refused", ttl-500*time.Millisecond, ttl/3)
	}
	t.Logf("lost after %v", time.Since(started))
	if err := lock.Err(); !strings.Contains(err.Error(), "renewal refused") {
		t.Fatalf("Err: %v", err)
	}
	if fence(admin, "k") != lock.Token() {
		t.Fatal("the lease still runs on the server")
	}
	// Rule 16: a hold known lost is released without the server; its lease ends by itself.
	release(t, lock, false)
	if n := calls(admin, "lock.release"); n != 0 {
		t.Fatalf("Release of a hold known lost sent %d LOCK.RELEASE", n)
	}
}

// Rule 9: shared holds and semaphore permits.
func TestSharedLocksAndSemaphores(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	r1 := obtain(t, l, "doc", 5*time.Second, redislock.WithShared())
	r2 := obtain(t, l, "doc", 5*time.Second, redislock.WithShared())
	if r1.Token() == r2.Token() {
		t.Fatal("two readers, one token")
	}
	if _, err := l.Obtain(ctx, "doc", 5*time.Second, redislock.WithWait(0)); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a writer beside readers: %v", err)
	}
	writer := obtainAsync(ctx, l, "doc", 5*time.Second)
	eventually(t, 2*time.Second, "the writer waits", func() bool { return waiters(t, r, "doc") == 1 })
	release(t, r1, true)
	release(t, r2, true)
	w := await(t, writer, 2*time.Second)
	if w.err != nil {
		t.Fatal(w.err)
	}
	release(t, w.lock, true)

	a := obtain(t, l, "pool", 5*time.Second, redislock.WithPermits(3, 2))
	b := obtain(t, l, "pool", 5*time.Second, redislock.WithPermits(3, 1))
	if _, err := l.Obtain(ctx, "pool", 5*time.Second, redislock.WithPermits(3, 1), redislock.WithWait(0)); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a fourth permit of three: %v", err)
	}
	if err := a.Guard(ctx, "GET", "x").Err(); !errors.Is(err, redislock.ErrStale) {
		t.Fatalf("permits guard a write: %v", err)
	}
	if m := info(t, r, "pool"); m["mode"] != "semaphore" || m["permits"] != int64(3) {
		t.Fatalf("LOCK.INFO %v", m)
	}
	release(t, a, true)
	c := obtain(t, l, "pool", 5*time.Second, redislock.WithPermits(3, 2), redislock.WithWait(0))
	release(t, b, true)
	release(t, c, true)
}

// Rule 9: a session hold lives on a connection of its own and ends when it closes.
func TestSessionHoldsEndWithTheirConnection(t *testing.T) {
	r := client(t, server(t))
	l := redislock.New(r)
	lock := obtain(t, l, "s", time.Minute, redislock.WithSession())
	holders := info(t, r, "s")["holders"].([]any)
	session, ok := asMap(holders[0])["session"].(int64)
	if !ok {
		t.Fatalf("no session connection: %v", holders)
	}
	next := obtainAsync(ctx, l, "s", 5*time.Second, redislock.WithWait(10*time.Second))
	eventually(t, 2*time.Second, "queued", func() bool { return waiters(t, r, "s") == 1 })
	started := time.Now()
	r.ClientKillByFilter(ctx, "ID", itoa(session)) // what the death of this process does
	got := await(t, next, 5*time.Second)
	if got.err != nil || time.Since(started) > 2*time.Second {
		t.Fatalf("the next waiter after %v: %v", time.Since(started), got.err)
	}
	release(t, lock, false) // the session's hold ended with its connection
	release(t, got.lock, true)

	before := len(strings.Split(strings.TrimSpace(r.ClientList(ctx).Val()), "\n"))
	held := obtain(t, l, "s2", time.Minute, redislock.WithSession(), redislock.WithWatchdog(false))
	release(t, held, true)
	eventually(t, time.Second, "its connection is closed", func() bool {
		return len(strings.Split(strings.TrimSpace(r.ClientList(ctx).Val()), "\n")) <= before
	})
}

// Rule 9: a durable grant needs its replicas' acknowledgement, else it is released and not
// obtained.
func TestDurableGrantsNeedTheirReplicas(t *testing.T) {
	alone := client(t, server(t))
	_, err := redislock.New(alone).Obtain(ctx, "d", 5*time.Second, redislock.WithReplicas(1, 200*time.Millisecond))
	if !errors.Is(err, redislock.ErrNotObtained) || alone.Exists(ctx, "d").Val() != 0 {
		t.Fatalf("no replica: %v", err)
	}
	master := server(t, "--repl-diskless-sync-delay", "0")
	replica := server(t, "--replicaof", "127.0.0.1", itoa(int64(master.Port)))
	rc := client(t, replica)
	eventually(t, 20*time.Second, "the replica syncs", func() bool {
		return rc.Info(ctx, "replication").Val() != "" &&
			strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:up")
	})
	mc := client(t, master)
	lock := obtain(t, redislock.New(mc), "d", 5*time.Second, redislock.WithReplicas(1, 2*time.Second))
	if fence(rc, "d") != lock.Token() {
		t.Fatal("the replica does not have the grant")
	}
	release(t, lock, true)
}
