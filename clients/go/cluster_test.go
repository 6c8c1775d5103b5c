package redislock_test

// Routing in a Redis Cluster of three masters: every command of a lock, the waits', sessions'
// and watchdogs' connections of their own included, goes to the master of the key's slot.

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

func TestClusterRoutesEveryLockToItsSlotsMaster(t *testing.T) {
	c, err := testserver.StartCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	nodes := map[string]*redis.Client{}
	for _, n := range c.Nodes {
		nodes[n.Addr()] = client(t, n)
	}
	// One hash tag served by each master.
	tags := map[string]string{}
	for i := 0; len(tags) < len(nodes); i++ {
		tag := fmt.Sprintf("{sku:%d}", i)
		if slot := cc.ClusterKeySlot(ctx, tag).Val(); slot >= 0 {
			m, err := cc.MasterForKey(ctx, tag)
			if err != nil {
				t.Fatal(err)
			}
			if _, seen := tags[m.Options().Addr]; !seen {
				tags[m.Options().Addr] = tag
			}
		}
	}
	l := redislock.New(cc)
	for addr, tag := range tags {
		node, key := nodes[addr], tag+":lock"
		cc.Set(ctx, tag+":stock", 10, 0)
		// A 1.5 s lease: renewals every 500 ms with 1 s of slack each.
		lock := obtain(t, l, key, 1500*time.Millisecond)
		if fence(node, key) != lock.Token() {
			t.Fatalf("%s is not held on %s, the master of its slot", key, addr)
		}
		waiting := obtainAsync(ctx, l, key, time.Second, redislock.WithWait(5*time.Second), redislock.WithSession())
		eventually(t, 2*time.Second, "the waiter queues on "+addr, func() bool { return waiters(t, node, key) == 1 })
		if left, err := lock.Guard(ctx, "DECRBY", tag+":stock", 1).Int64(); err != nil || left != 9 {
			t.Fatalf("guarded DECRBY on %s: %d, %v", addr, left, err)
		}
		eventually(t, 5*time.Second, "a renewal on "+addr, func() bool { return calls(node, "lock.extend") >= 1 })
		if fence(node, key) != lock.Token() {
			t.Fatalf("not renewed on %s: %v", addr, lock.Err())
		}
		release(t, lock, true)
		got := await(t, waiting, 5*time.Second)
		if got.err != nil || fence(node, key) != got.lock.Token() {
			t.Fatalf("the waiter on %s: %v", addr, got.err)
		}
		holders := info(t, node, key)["holders"].([]any)
		if _, ok := asMap(holders[0])["session"].(int64); !ok {
			t.Fatalf("not a session hold: %v", holders)
		}
		release(t, got.lock, true)
	}
	// Rule 23: a set whose keys share a hash tag goes to that slot's master, waits and renewals
	// included; keys in several slots are ErrCrossSlot, not retried.
	for addr, tag := range tags {
		node, keys := nodes[addr], []string{tag + ":a", tag + ":b"}
		set, err := l.ObtainAll(ctx, keys, 900*time.Millisecond, redislock.WithWait(time.Second))
		if err != nil {
			t.Fatalf("ObtainAll on %s: %v", addr, err)
		}
		renewed := calls(node, "lock.extend")
		eventually(t, 5*time.Second, "the set renewed on "+addr, func() bool { return calls(node, "lock.extend") >= renewed+2 })
		if fence(node, keys[0]) != set.Token(keys[0]) || fence(node, keys[1]) != set.Token(keys[1]) {
			t.Fatalf("the set is not held on %s: %v", addr, set.Err())
		}
		if held, err := set.Release(ctx); !held || err != nil {
			t.Fatalf("set Release on %s: %v, %v", addr, held, err)
		}
	}
	var spread []string
	for _, tag := range tags {
		spread = append(spread, tag+":x")
	}
	for _, wait := range []time.Duration{0, time.Second} {
		if _, err := l.ObtainAll(ctx, spread, time.Second, redislock.WithWait(wait)); !errors.Is(err, redislock.ErrCrossSlot) {
			t.Fatalf("ObtainAll of keys in %d slots (wait %v): %v, want ErrCrossSlot", len(spread), wait, err)
		}
	}
	// Nothing was sent to a node that does not serve its slot: no node answered MOVED or ASK
	// (how many LOCK.ACQUIREs each ran is not the point: a retried wait would add one).
	for addr, node := range nodes {
		for _, redirect := range []string{"MOVED", "ASK"} {
			if n := testserver.Info(ctx, node, "errorstats", "errorstat_"+redirect); n != "" {
				t.Fatalf("%s answered %s: %s", addr, redirect, n)
			}
		}
		if calls(node, "lock.acquire") == 0 {
			t.Fatalf("%s ran no LOCK.ACQUIRE", addr)
		}
	}
}

// shortCommands is how many goroutines are in the package's short commands (pooled).
func shortCommands() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "redis-lock/clients/go.pooled[")
}

// Rule 14 in a cluster: a guarded write, an extend and a release to a frozen master are
// unavailable within the bound, and the goroutine each left sending ends with the bound too,
// although the cluster client never times out a read (ReadTimeout -1).
func TestClusterShortCommandsToAFrozenMasterEndWithTheBound(t *testing.T) {
	c, err := testserver.StartCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ReadTimeout: -1})
	t.Cleanup(func() { _ = cc.Close() })
	master, err := cc.MasterForKey(ctx, "{k}")
	if err != nil {
		t.Fatal(err)
	}
	var frozen *testserver.Server
	for _, n := range c.Nodes {
		if n.Addr() == master.Options().Addr {
			frozen = n
		}
	}
	// One Locker per command: each finds the node answering so far, and sends through the pool.
	calls := map[string]func(*redislock.Lock) error{
		"Guard": func(l *redislock.Lock) error { return l.Guard(ctx, "SET", "{k}:x", "1").Err() },
		"Extend": func(l *redislock.Lock) error {
			_, err := l.Extend(ctx, time.Minute)
			return err
		},
		"Release": func(l *redislock.Lock) error {
			_, err := l.Release(ctx)
			return err
		},
	}
	holds := map[string]*redislock.Lock{}
	for name := range calls {
		l := redislock.New(cc, redislock.WithUnavailableAfter(bound))
		holds[name] = obtain(t, l, "{k}:"+name, time.Minute, redislock.WithWatchdog(false))
	}
	frozen.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { frozen.Signal(syscall.SIGCONT) })
	for name, call := range calls {
		started := time.Now()
		if err := call(holds[name]); !errors.Is(err, redislock.ErrUnavailable) {
			t.Fatalf("%s: %v", name, err)
		}
		if took := time.Since(started); took > bound+margin {
			t.Fatalf("%s took %v", name, took)
		}
		// The bound passed: the command's goroutine ends now, not at a read timeout.
		eventually(t, margin, name+"'s goroutine ends", func() bool { return shortCommands() == 0 })
	}
}
