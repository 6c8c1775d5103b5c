package redislock_test

// The inventory scenario of the field reports: a stock of 100, sold one item per hold through
// a guarded DECRBY, by 16 goroutines of this process and 4 helper processes of 4 goroutines
// each (this test binary, re-executed), while helpers are frozen with SIGSTOP for longer than
// the lease, whenever one holds the lock (else one at random). A frozen holder's lease runs out and the next holder
// sells; when the frozen one wakes, its write is refused (rule 12: no client can stop a paused
// process, the token is what protects the stock). Exactly 100 are sold.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

const (
	helperEnv   = "REDISLOCK_GO_HELPER"
	helperAddr  = "REDISLOCK_GO_ADDR"
	stockKey    = "{sku:9}:stock"
	stockLock   = "{sku:9}:lock"
	sellerLease = 300 * time.Millisecond
)

// sell sells one item per hold until the stock is gone: how many it sold, and how many of its
// writes were refused as stale. owner names each hold's owner ("" for a fresh UUID).
func sell(ctx context.Context, r *redis.Client, owner func() string) (sold, stale int, err error) {
	l := redislock.New(r)
	defer func() { _ = l.Close() }()
	for {
		var opts []redislock.Option
		if name := owner(); name != "" {
			opts = append(opts, redislock.WithOwner(name))
		}
		lock, err := l.Obtain(ctx, stockLock, sellerLease, opts...)
		if err != nil {
			return sold, stale, err
		}
		stock, err := r.Get(ctx, stockKey).Int()
		if err != nil || stock <= 0 {
			_, _ = lock.Release(ctx)
			return sold, stale, err
		}
		time.Sleep(10 * time.Millisecond) // the parent may SIGSTOP this process here
		switch err := lock.Guard(ctx, "DECRBY", stockKey, 1).Err(); {
		case err == nil:
			sold++
		case errors.Is(err, redislock.ErrStale):
			stale++
		default:
			return sold, stale, err
		}
		_, _ = lock.Release(ctx)
	}
}

// sellers runs n goroutines of sell; their totals. A helper's owners start with its name, so
// the parent can tell which process holds the lock.
func sellers(ctx context.Context, r *redis.Client, n int, name string) (sold, stale int, err error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var holds atomic.Int64
	owner := func() string {
		if name == "" {
			return ""
		}
		return fmt.Sprintf("%s-%d", name, holds.Add(1))
	}
	for range n {
		wg.Go(func() {
			s, st, e := sell(ctx, r, owner)
			mu.Lock()
			defer mu.Unlock()
			sold, stale, err = sold+s, stale+st, errors.Join(err, e)
		})
	}
	wg.Wait()
	return sold, stale, err
}

// helperMain is a helper process: 4 sellers; prints "sold stale".
func helperMain() int {
	r := redis.NewClient(&redis.Options{Addr: os.Getenv(helperAddr)})
	defer func() { _ = r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sold, stale, err := sellers(ctx, r, 4, os.Getenv(helperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(sold, stale)
	return 0
}

// helperHolding is which helper holds the stock's lock now (LOCK.INFO names its owner).
func helperHolding(t *testing.T, r *redis.Client) (int, bool) {
	if owner, ok := info(t, r, stockLock)["owner"].(string); ok {
		var k int
		if _, err := fmt.Sscanf(owner, "helper%d-", &k); err == nil {
			return k, true
		}
	}
	return 0, false
}

func TestInventory100InStock16GoroutinesAnd4ProcessesExactly100Sold(t *testing.T) {
	s := server(t)
	r := client(t, s)
	r.Set(ctx, stockKey, 100, 0)
	helpers := make([]*exec.Cmd, 4)
	outs := make([]*bytes.Buffer, 4)
	for i := range helpers {
		outs[i] = &bytes.Buffer{}
		helpers[i] = exec.Command(os.Args[0], "-test.run=^$")
		helpers[i].Env = append(os.Environ(), helperEnv+"=helper"+strconv.Itoa(i), helperAddr+"="+s.Addr())
		helpers[i].Stdout, helpers[i].Stderr = outs[i], outs[i]
		if err := helpers[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	exited := make(chan int, len(helpers))
	for i, h := range helpers {
		go func() { _ = h.Wait(); exited <- i }()
	}
	type local struct{ sold, stale int }
	mine := make(chan local, 1)
	var localErr error
	go func() {
		sold, stale, err := sellers(ctx, r, 16, "")
		localErr = err
		mine <- local{sold, stale}
	}()

	// Every ~50 ms freeze a helper past the lease: the one that holds the lock (LOCK.INFO
	// names its owner), or else one at random; until every helper has exited.
	done := make([]bool, len(helpers))
	alive, pauses, holders, rng := len(helpers), 0, 0, uint32(7)
	deadline := time.After(60 * time.Second)
	for alive > 0 {
		select {
		case i := <-exited:
			done[i] = true
			alive--
			continue
		case <-deadline:
			for _, h := range helpers {
				_ = h.Process.Kill()
			}
			t.Fatal("the sellers did not finish within 60 s")
		default:
		}
		rng = rng*1103515245 + 12345
		i := int(rng>>16) % len(helpers)
		// Until a holder has been frozen (the test's point), look for a helper holding the lock
		// every millisecond for up to a second, rather than once per round: one sample per
		// round missed every time in a run that sold out after 5 rounds.
		look := time.Now().Add(time.Second)
		k, holding := helperHolding(t, r)
		for !holding && holders == 0 && time.Now().Before(look) {
			time.Sleep(time.Millisecond)
			k, holding = helperHolding(t, r)
		}
		if holding {
			i = k
		}
		if victim := helpers[i]; !done[i] && victim.Process.Signal(syscall.SIGSTOP) == nil {
			pauses++
			if holding {
				holders++
			}
			time.Sleep(sellerLease + 100*time.Millisecond)
			_ = victim.Process.Signal(syscall.SIGCONT)
		}
		time.Sleep(50 * time.Millisecond)
	}
	here := <-mine
	if localErr != nil {
		t.Fatal(localErr)
	}
	sold, stale := here.sold, here.stale
	for i, h := range helpers {
		var s, st int
		if _, err := fmt.Sscan(outs[i].String(), &s, &st); err != nil || !h.ProcessState.Success() {
			t.Fatalf("helper %d: %v: %s", i, err, outs[i])
		}
		sold, stale = sold+s, stale+st
	}
	if left := r.Get(ctx, stockKey).Val(); left != "0" || sold != 100 {
		t.Fatalf("sold %d, stock left %s", sold, left)
	}
	if holders == 0 {
		t.Fatalf("no holder was frozen (%d pauses)", pauses)
	}
	t.Logf("100 sold (%d here, %d by the helpers); %d pauses, %d of them of a holder; %d writes refused as stale",
		here.sold, sold-here.sold, pauses, holders, stale)
}
