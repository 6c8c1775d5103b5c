package redislock_test

// Rule 11 through redis.NewFailoverClient: a master and a replica with the module, three
// Sentinels (quorum 2, a master down after 1 s) on loopback; the master is killed with kill -9.

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

// A durable holder's watchdog renews on the promoted replica; a waiter that was blocked on the
// dead master asks again with its owner there (every connection asks the Sentinels for the
// master when it connects) and is granted when the holder releases; new holds are granted by
// the promoted replica.
func TestASentinelFailoverIsFollowedByWaitersAndWatchdogs(t *testing.T) {
	d := deployment(t)
	holderClient, waiterClient := failoverClient(t, d), failoverClient(t, d)
	// A 20 s lease, renewed every 6.7 s: the renewals that fail while the master is down and
	// the Sentinels promote the replica (down after 1 s, then an election: seconds on a loaded
	// machine) must leave one through to the promoted replica before the lease ends, which
	// holds while the failover takes less than a renewal period.
	holder := obtain(t, redislock.New(holderClient), "k", 20*time.Second,
		redislock.WithReplicas(1, 2*time.Second))
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second) // the failover and a renewal period fit
	defer cancel()
	waiting := obtainAsync(waitCtx, redislock.New(waiterClient), "k", 5*time.Second, redislock.WithOwner("waiter"))
	master := client(t, d.Master)
	eventually(t, 2*time.Second, "the waiter blocks on the master", func() bool { return blocked(master) == "1" })

	d.Master.Kill()
	started := time.Now()
	eventually(t, 30*time.Second, "the Sentinels promote the replica", func() bool { return d.Named() == d.Replica.Addr() })
	t.Logf("failover after %v", time.Since(started))
	promoted := client(t, d.Replica)
	// Within a renewal period (6.7 s) and the time to reach the new master.
	eventually(t, 20*time.Second, "a renewal on the promoted replica", func() bool { return calls(promoted, "lock.extend") >= 1 })
	if holder.Err() != nil || fence(promoted, "k") != holder.Token() {
		t.Fatalf("the durable hold on the new master: %v", holder.Err())
	}
	eventually(t, 10*time.Second, "the waiter waits again on the new master", func() bool { return waiters(t, promoted, "k") == 1 })
	release(t, holder, true)
	got := await(t, waiting, 10*time.Second)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if fence(promoted, "k") != got.lock.Token() || got.lock.Token() <= holder.Token() || info(t, promoted, "k")["owner"] != "waiter" {
		t.Fatalf("the waiter's grant: %d (holder %d), %v", got.lock.Token(), holder.Token(), info(t, promoted, "k"))
	}
	release(t, got.lock, true)

	again := obtain(t, redislock.New(holderClient), "k2", 5*time.Second)
	if fence(promoted, "k2") != again.Token() {
		t.Fatal("a new hold is not on the promoted replica")
	}
	release(t, again, true)
}

// A grant the replica never received: the promoted replica does not know the hold, so the
// watchdog's first renewal there answers 0 (or none gets through before the lease ends) and
// the hold is reported lost.
func TestAWatchdogReportsTheHoldLostWhenTheNewMasterLacksIt(t *testing.T) {
	d := deployment(t)
	master := client(t, d.Master)
	d.Replica.Signal(syscall.SIGSTOP)
	defer d.Replica.Signal(syscall.SIGCONT)
	if err := master.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err) // the grant below never reaches the replica
	}
	lock := obtain(t, redislock.New(failoverClient(t, d)), "k", 3*time.Second)
	d.Master.Kill()
	d.Replica.Signal(syscall.SIGCONT)
	eventually(t, 30*time.Second, "the Sentinels promote the replica", func() bool { return d.Named() == d.Replica.Addr() })
	select {
	case <-lock.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("not reported lost")
	}
	if !errors.Is(lock.Err(), redislock.ErrLost) {
		t.Fatalf("Err: %v", lock.Err())
	}
	t.Logf("lost: %v", lock.Err())
	release(t, lock, false)
	if client(t, d.Replica).Exists(ctx, "k").Val() != 0 {
		t.Fatal("the new master has the hold")
	}
}

func deployment(t *testing.T) *testserver.Deployment {
	t.Helper()
	d, err := testserver.StartDeployment()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// failoverClient is a NewFailoverClient of d's Sentinels, closed at the test's end.
func failoverClient(t *testing.T, d *testserver.Deployment) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    testserver.MasterName,
		SentinelAddrs: d.SentinelAddrs(),
		ReadTimeout:   2 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
