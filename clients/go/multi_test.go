package redislock_test

// Lock sets (rule 23 of docs/clients.md): ObtainAll and MultiLock, each test on a server of
// its own.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// obtainAll takes a set or fails the test.
func obtainAll(t testing.TB, l *redislock.Locker, keys []string, ttl time.Duration, opts ...redislock.Option) *redislock.MultiLock {
	t.Helper()
	set, err := l.ObtainAll(ctx, keys, ttl, opts...)
	if err != nil {
		t.Fatalf("ObtainAll %v: %v", keys, err)
	}
	return set
}

type setResult struct {
	set *redislock.MultiLock
	err error
}

func obtainAllAsync(ctx context.Context, l *redislock.Locker, keys []string, ttl time.Duration, opts ...redislock.Option) <-chan setResult {
	out := make(chan setResult, 1)
	go func() {
		set, err := l.ObtainAll(ctx, keys, ttl, opts...)
		out <- setResult{set, err}
	}()
	return out
}

func awaitSet(t testing.TB, ch <-chan setResult, limit time.Duration) setResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("ObtainAll did not return within %v", limit)
		return setResult{}
	}
}

// Rule 23: a set has every key's token, in the order given and by key; Release frees every
// key and answers true, then false without the server.
func TestObtainAllGivesATokenPerKeyAndReleaseFreesThem(t *testing.T) {
	r := client(t, server(t))
	keys := []string{"acct:2", "acct:1", "acct:3"}
	set := obtainAll(t, redislock.New(r), keys, 5*time.Second)
	tokens := set.Tokens()
	if len(tokens) != 3 {
		t.Fatalf("tokens %v", tokens)
	}
	for i, key := range keys {
		if tokens[i] <= 0 || fence(r, key) != tokens[i] || set.Token(key) != tokens[i] {
			t.Fatalf("%s: token %d, Token %d, the server's %d", key, tokens[i], set.Token(key), fence(r, key))
		}
	}
	if set.Token("acct:9") != 0 || set.Err() != nil {
		t.Fatalf("Token of a key not in the set %d, Err %v", set.Token("acct:9"), set.Err())
	}
	held, err := set.Release(ctx)
	if !held || err != nil {
		t.Fatalf("Release = %v, %v", held, err)
	}
	if n := r.Exists(ctx, keys...).Val(); n != 0 {
		t.Fatalf("%d keys left after Release", n)
	}
	sent := calls(r, "lock.mrelease")
	held, err = set.Release(ctx)
	if held || err != nil || calls(r, "lock.mrelease") != sent {
		t.Fatalf("second Release = %v, %v (LOCK.MRELEASE sent again: %v)", held, err, calls(r, "lock.mrelease") != sent)
	}
	select {
	case <-set.Lost():
		t.Fatal("a released set is not lost")
	default:
	}
}

// Rule 23: the try-once form answers not obtained when one key is busy, and takes none.
func TestObtainAllTryOnceTakesNothingWhenOneKeyIsBusy(t *testing.T) {
	r := client(t, server(t))
	locker := redislock.New(r)
	other := obtain(t, locker, "b", 5*time.Second)
	_, err := locker.ObtainAll(ctx, []string{"a", "b", "c"}, 5*time.Second, redislock.WithWait(0))
	if !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("ObtainAll = %v, want ErrNotObtained", err)
	}
	if n := r.Exists(ctx, "a", "c").Val(); n != 0 {
		t.Fatalf("%d of the free keys taken", n)
	}
	release(t, other, true)
}

// Rule 23: two sets of the same keys, named in opposite orders, both waiting, are granted in
// turn: no deadlock.
func TestObtainAllInOppositeOrdersBothGrantedInTurn(t *testing.T) {
	r := client(t, server(t))
	locker := redislock.New(r)
	first := obtain(t, locker, "x", 5*time.Second)
	a := obtainAllAsync(ctx, locker, []string{"x", "y"}, 5*time.Second)
	eventually(t, 5*time.Second, "the first set waits", func() bool { return waiters(t, r, "x") == 1 })
	b := obtainAllAsync(ctx, locker, []string{"y", "x"}, 5*time.Second)
	eventually(t, 5*time.Second, "both sets wait", func() bool { return waiters(t, r, "x") == 2 })
	if r.Exists(ctx, "y").Val() != 0 {
		t.Fatal("a waiting set took its free key")
	}
	release(t, first, true)
	got := awaitSet(t, a, 5*time.Second)
	if got.err != nil {
		t.Fatalf("first set: %v", got.err)
	}
	if held, err := got.set.Release(ctx); !held || err != nil {
		t.Fatalf("first set's Release = %v, %v", held, err)
	}
	second := awaitSet(t, b, 5*time.Second)
	if second.err != nil {
		t.Fatalf("second set: %v", second.err)
	}
	if fence(r, "y") != second.set.Token("y") || fence(r, "x") != second.set.Token("x") {
		t.Fatalf("second set's tokens %v, the server's %d %d", second.set.Tokens(), fence(r, "y"), fence(r, "x"))
	}
	if held, err := second.set.Release(ctx); !held || err != nil {
		t.Fatalf("second set's Release = %v, %v", held, err)
	}
}

// Rules 6 and 23: the watchdog renews every member past several ttls, with the same tokens.
func TestObtainAllWatchdogKeepsTheSetPastItsTTL(t *testing.T) {
	r := client(t, server(t))
	keys := []string{"w:1", "w:2", "w:3"}
	set := obtainAll(t, redislock.New(r), keys, 300*time.Millisecond)
	time.Sleep(1200 * time.Millisecond) // four ttls: only renewals keep the set
	for _, key := range keys {
		if fence(r, key) != set.Token(key) {
			t.Fatalf("%s: token %d, the server's %d", key, set.Token(key), fence(r, key))
		}
	}
	if set.Err() != nil {
		t.Fatalf("Err = %v", set.Err())
	}
	if held, err := set.Release(ctx); !held || err != nil {
		t.Fatalf("Release = %v, %v", held, err)
	}
}

// Rules 8, 16 and 23: one member force-released, the set is lost once, naming the key; the
// other members are released; then Release, Extend and Guard answer without the server.
func TestObtainAllMemberLostLosesTheSetAndReleasesTheOthers(t *testing.T) {
	r := client(t, server(t))
	keys := []string{"m:1", "m:2", "m:3"}
	set := obtainAll(t, redislock.New(r), keys, 600*time.Millisecond)
	r.Do(ctx, "LOCK.FORCERELEASE", "m:2")
	select {
	case <-set.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("the set was not reported lost")
	}
	err := set.Err()
	if !errors.Is(err, redislock.ErrLost) || !strings.Contains(err.Error(), "m:2: the lease ran out before it was renewed") {
		t.Fatalf("Err = %v", err)
	}
	eventually(t, 3*time.Second, "the other members released", func() bool {
		return r.Exists(ctx, "m:1", "m:3").Val() == 0
	})
	if set.Err() != err {
		t.Fatalf("Err changed: %v, then %v", err, set.Err())
	}
	// (LOCK.EXTEND is not counted here: a renewal written just before the loss may land late;
	// TestMultiLockExtendAndFixedLease counts it, without a watchdog.)
	sent := calls(r, "lock.mrelease") + calls(r, "lock.guard")
	if held, err := set.Release(ctx); held || err != nil {
		t.Fatalf("Release = %v, %v", held, err)
	}
	if ok, err := set.Extend(ctx, time.Second); ok || err != nil {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	if err := set.Guard(ctx, "m:1", "SET", "x", "1").Err(); !errors.Is(err, redislock.ErrStale) {
		t.Fatalf("Guard = %v, want ErrStale", err)
	}
	if now := calls(r, "lock.mrelease") + calls(r, "lock.guard"); now != sent {
		t.Fatalf("%d commands sent for a set known lost", now-sent)
	}
}

// Rules 16 and 23: a release that finds a member gone answers false and marks the set lost.
func TestMultiLockReleaseFindingAMemberGoneIsFalseAndLost(t *testing.T) {
	r := client(t, server(t))
	set := obtainAll(t, redislock.New(r), []string{"g:1", "g:2"}, 30*time.Second)
	r.Do(ctx, "LOCK.FORCERELEASE", "g:1")
	if held, err := set.Release(ctx); held || err != nil {
		t.Fatalf("Release = %v, %v; want false", held, err)
	}
	select {
	case <-set.Lost():
	default:
		t.Fatal("Lost not closed")
	}
	if err := set.Err(); !errors.Is(err, redislock.ErrLost) || !strings.Contains(err.Error(), "the hold was gone when released") {
		t.Fatalf("Err = %v", err)
	}
	if r.Exists(ctx, "g:2").Val() != 0 {
		t.Fatal("the live member was not released")
	}
}

// Rules 17 and 23: arguments are refused before anything is sent.
func TestObtainAllArgumentsCheckedBeforeSending(t *testing.T) {
	r := client(t, server(t))
	locker := redislock.New(r)
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	cases := []struct {
		name string
		keys []string
		ttl  time.Duration
		opts []redislock.Option
	}{
		{"no keys", nil, time.Second, nil},
		{"a key twice", []string{"a", "b", "a"}, time.Second, nil},
		{"65 keys", many, time.Second, nil},
		{"ttl 0", []string{"a"}, 0, nil},
		{"negative wait", []string{"a"}, time.Second, []redislock.Option{redislock.WithWait(-time.Second)}},
		{"permits", []string{"a"}, time.Second, []redislock.Option{redislock.WithPermits(3, 1)}},
		{"session", []string{"a"}, time.Second, []redislock.Option{redislock.WithSession()}},
		{"replicas", []string{"a"}, time.Second, []redislock.Option{redislock.WithReplicas(1, time.Second)}},
	}
	for _, c := range cases {
		if _, err := locker.ObtainAll(ctx, c.keys, c.ttl, c.opts...); !errors.Is(err, redislock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, err)
		}
	}
	set := obtainAll(t, locker, []string{"a", "b"}, 5*time.Second)
	if ok, err := set.Extend(ctx, 0); ok || !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Errorf("Extend(0) = %v, %v", ok, err)
	}
	if err := set.Guard(ctx, "c", "SET", "c", "1").Err(); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Errorf("Guard of a key not in the set: %v", err)
	}
	if n := calls(r, "lock.macquire"); n != 1 {
		t.Errorf("%d LOCK.MACQUIRE sent, want the one that took the set", n)
	}
	if n := calls(r, "lock.guard") + calls(r, "lock.extend"); n != 0 {
		t.Errorf("%d commands sent for refused arguments", n)
	}
	if held, err := set.Release(ctx); !held || err != nil {
		t.Fatalf("Release = %v, %v", held, err)
	}
}

// Rules 5 and 23: a guarded write names its key and goes with that key's token; once another
// holder has the key, it is refused as stale.
func TestMultiLockGuardSendsTheKeysToken(t *testing.T) {
	r := client(t, server(t))
	set := obtainAll(t, redislock.New(r), []string{"{o}:lock:1", "{o}:lock:2"}, 30*time.Second)
	if err := set.Guard(ctx, "{o}:lock:1", "SET", "{o}:data:1", "a").Err(); err != nil {
		t.Fatalf("Guard 1: %v", err)
	}
	if err := set.Guard(ctx, "{o}:lock:2", "SET", "{o}:data:2", "b").Err(); err != nil {
		t.Fatalf("Guard 2: %v", err)
	}
	if r.Get(ctx, "{o}:data:1").Val() != "a" || r.Get(ctx, "{o}:data:2").Val() != "b" {
		t.Fatal("the guarded writes did not run")
	}
	// A newer holder of key 2 (after a force release): the old token is stale there.
	r.Do(ctx, "LOCK.FORCERELEASE", "{o}:lock:2")
	r.Do(ctx, "LOCK.ACQUIRE", "{o}:lock:2", "someone", 30000)
	if err := set.Guard(ctx, "{o}:lock:2", "SET", "{o}:data:2", "c").Err(); !errors.Is(err, redislock.ErrStale) {
		t.Fatalf("Guard with a stale token: %v", err)
	}
	if r.Get(ctx, "{o}:data:2").Val() != "b" {
		t.Fatal("a stale guarded write ran")
	}
	_, _ = set.Release(ctx)
}

// Rules 20 and 23: Extend renews every member; a fixed lease set is lost at its end, once.
func TestMultiLockExtendAndFixedLease(t *testing.T) {
	r := client(t, server(t))
	locker := redislock.New(r)
	set := obtainAll(t, locker, []string{"e:1", "e:2"}, 300*time.Millisecond, redislock.WithWatchdog(false))
	if ok, err := set.Extend(ctx, 10*time.Second); !ok || err != nil {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	for _, key := range []string{"e:1", "e:2"} {
		if ms, _ := info(t, r, key)["ttl"].(int64); ms < 5000 {
			t.Fatalf("%s: ttl %d ms after Extend(10s)", key, ms)
		}
	}
	if ok, err := set.Extend(ctx, 200*time.Millisecond); !ok || err != nil {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	select {
	case <-set.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("the fixed lease did not end")
	}
	if err := set.Err(); !errors.Is(err, redislock.ErrLost) || !strings.Contains(err.Error(), "the lease ended (a fixed lease") {
		t.Fatalf("Err = %v", err)
	}
	// Known lost: answered without the server, so a context that is already done makes no
	// difference. (Counting the server's commands would also count the background
	// LOCK.MRELEASE of the members still held, which may come after the loss is signalled.)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if ok, err := set.Extend(done, time.Second); ok || err != nil {
		t.Fatalf("Extend of a set known lost = %v, %v", ok, err)
	}
	if held, err := set.Release(done); held || err != nil {
		t.Fatalf("Release = %v, %v", held, err)
	}
}

// Rule 23: a shared set beside another shared set; an owner holding some keys while others are
// busy gets ErrDeadlock when it would wait.
func TestObtainAllSharedAndDeadlock(t *testing.T) {
	r := client(t, server(t))
	locker := redislock.New(r)
	one := obtainAll(t, locker, []string{"s:1", "s:2"}, 5*time.Second, redislock.WithShared())
	two := obtainAll(t, locker, []string{"s:2", "s:1"}, 5*time.Second, redislock.WithShared(), redislock.WithWait(0))
	for _, set := range []*redislock.MultiLock{one, two} {
		if held, err := set.Release(ctx); !held || err != nil {
			t.Fatalf("Release = %v, %v", held, err)
		}
	}
	mine := obtain(t, locker, "d:1", 5*time.Second, redislock.WithOwner("me"))
	theirs := obtain(t, locker, "d:2", 5*time.Second)
	_, err := locker.ObtainAll(ctx, []string{"d:1", "d:2"}, 5*time.Second, redislock.WithOwner("me"), redislock.WithWait(time.Second))
	if !errors.Is(err, redislock.ErrDeadlock) {
		t.Fatalf("ObtainAll = %v, want ErrDeadlock", err)
	}
	release(t, mine, true)
	release(t, theirs, true)
}
