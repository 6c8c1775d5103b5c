// Command bench measures Go lock clients on one contended lock, in one run on one server:
// this repository's redislock (waits in the server's FIFO queue), go-redsync/redsync on a single
// pool (Redlock's SET NX with retries: its defaults, and a 1 ms retry delay) and bsm/redislock
// (SET NX with a retry strategy: 1 ms linear, and its exponential 16 ms to 512 ms). N goroutines
// loop: take the lock, hold it (sleep), release. For each client it prints grants/s, Jain's
// fairness index over the goroutines' grant counts and the p99 of the wait for a grant (a wait
// still going on when the run ends counts with its length so far: a starved goroutine shows),
// then the ratios of redislock to each.
//
// Usage: bench [-addr host:port] [-seconds 3] [-clients 32] [-hold 1ms] [-json]
//
// Without -addr it starts a server of its own (LOCK_TEST_SERVER, default redis-server, with the
// module LOCK_MODULE, default target/debug/libredis_lock.so). -json prints one JSON object per
// client instead (the Rust benchmark, `make bench`, reads them).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

// A result is one client's run.
type result struct {
	Client       string  `json:"client"`
	Grants       int     `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	Jain         float64 `json:"jain"`
	WaitP50Ms    float64 `json:"wait_p50_ms"`
	WaitP99Ms    float64 `json:"wait_p99_ms"`
	Failed       int     `json:"failed_takes"`
}

// take takes the lock for goroutine i and returns its release.
type take func(ctx context.Context, i int) (release func(), err error)

// run has n goroutines take, hold and release for d; the result.
func run(name string, n int, d, hold time.Duration, take take) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	counts := make([]int, n)
	failed := make([]int, n)
	waits := make([][]time.Duration, n)
	var wg sync.WaitGroup
	var firstErr sync.Once
	started := time.Now()
	for i := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				asked := time.Now()
				release, err := take(ctx, i)
				if err != nil {
					if ctx.Err() == nil {
						failed[i]++
						firstErr.Do(func() { fmt.Fprintf(os.Stderr, "%s: a take failed: %v\n", name, err) })
					} else {
						// Still waiting when the run ended: a wait at least this long.
						waits[i] = append(waits[i], time.Since(asked))
					}
					continue
				}
				waits[i] = append(waits[i], time.Since(asked))
				time.Sleep(hold)
				release()
				counts[i]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(started)
	var all []time.Duration
	total, squares, fails := 0, 0.0, 0
	for i := range n {
		all = append(all, waits[i]...)
		total += counts[i]
		squares += float64(counts[i]) * float64(counts[i])
		fails += failed[i]
	}
	slices.Sort(all)
	jain := 0.0
	if squares > 0 {
		jain = float64(total) * float64(total) / (float64(n) * squares)
	}
	return result{
		Client:       name,
		Grants:       total,
		GrantsPerSec: float64(total) / elapsed.Seconds(),
		Jain:         jain,
		WaitP50Ms:    quantile(all, 0.50),
		WaitP99Ms:    quantile(all, 0.99),
		Failed:       fails,
	}
}

func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(len(sorted)-1, int(math.Ceil(q*float64(len(sorted))))-1)
	return float64(sorted[max(i, 0)]) / float64(time.Millisecond)
}

const ttl = 10 * time.Second

func ours(client *redis.Client) take {
	locker := redislock.New(client)
	return func(ctx context.Context, _ int) (func(), error) {
		lock, err := locker.Obtain(ctx, "bench:go:redislock", ttl)
		if err != nil {
			return nil, err
		}
		return func() { _, _ = lock.Release(context.Background()) }, nil
	}
}

func redsyncClient(client *redis.Client, n int, opts ...redsync.Option) take {
	rs := redsync.New(goredis.NewPool(client))
	mutexes := make([]*redsync.Mutex, n)
	for i := range mutexes {
		mutexes[i] = rs.NewMutex("bench:go:redsync", append([]redsync.Option{redsync.WithExpiry(ttl)}, opts...)...)
	}
	return func(ctx context.Context, i int) (func(), error) {
		m := mutexes[i]
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func() { _, _ = m.UnlockContext(context.Background()) }, nil
	}
}

func bsmClient(client *redis.Client, key string, retry func() bsm.RetryStrategy) take {
	locker := bsm.New(client)
	return func(ctx context.Context, _ int) (func(), error) {
		lock, err := locker.Obtain(ctx, key, ttl, &bsm.Options{RetryStrategy: retry()})
		if err != nil {
			return nil, err
		}
		return func() { _ = lock.Release(context.Background()) }, nil
	}
}

func main() {
	addr := flag.String("addr", "", "the server (default: start one)")
	seconds := flag.Float64("seconds", 3, "seconds per client")
	n := flag.Int("clients", 32, "goroutines on the lock")
	hold := flag.Duration("hold", time.Millisecond, "how long each grant is held")
	asJSON := flag.Bool("json", false, "one JSON object per client")
	flag.Parse()
	redis.SetLogger(quiet{}) // go-redis logs the connections the pollers' cancelled calls drop
	if *addr == "" {
		s, err := testserver.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer s.Stop()
		*addr = s.Addr()
	}
	client := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 2 * *n})
	defer func() { _ = client.Close() }()
	if err := client.Ping(context.Background()).Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	d := time.Duration(*seconds * float64(time.Second))
	clients := []struct {
		name string
		take take
	}{
		{"redislock (WAIT in the server's queue)", ours(client)},
		{"redsync, one pool (defaults: 32 tries, 50-250 ms apart)", redsyncClient(client, *n)},
		{"redsync, one pool (retry every 1 ms)", redsyncClient(client, *n,
			redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(time.Millisecond))},
		{"bsm/redislock (retry every 1 ms)", bsmClient(client, "bench:go:bsm1",
			func() bsm.RetryStrategy { return bsm.LinearBackoff(time.Millisecond) })},
		{"bsm/redislock (exponential 16-512 ms)", bsmClient(client, "bench:go:bsmexp",
			func() bsm.RetryStrategy { return bsm.ExponentialBackoff(16*time.Millisecond, 512*time.Millisecond) })},
	}
	var results []result
	for _, c := range clients {
		r := run(c.name, *n, d, *hold, c.take)
		results = append(results, r)
		if *asJSON {
			line, _ := json.Marshal(r)
			fmt.Println(string(line))
		}
	}
	if *asJSON {
		return
	}
	fmt.Printf("%d goroutines on one lock, %v holds, %.0f s per client, %s\n\n", *n, *hold, *seconds, testserver.Binary())
	fmt.Printf("| client | grants/s | Jain | wait p50 ms | wait p99 ms | failed takes |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Printf("| %s | %.0f | %.4f | %.1f | %.1f | %d |\n", r.Client, r.GrantsPerSec, r.Jain, r.WaitP50Ms, r.WaitP99Ms, r.Failed)
	}
	fmt.Println()
	mine := results[0]
	for _, r := range results[1:] {
		fmt.Printf("redislock vs %s: %.2fx grants/s, Jain %.4f vs %.4f, wait p99 %s\n",
			r.Client, mine.GrantsPerSec/math.Max(r.GrantsPerSec, 1), mine.Jain, r.Jain, p99Ratio(mine, r))
	}
}

// p99Ratio says how the two waits' p99 compare.
func p99Ratio(mine, other result) string {
	if mine.WaitP99Ms <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx shorter (%.1f ms vs %.1f ms)", other.WaitP99Ms/mine.WaitP99Ms, mine.WaitP99Ms, other.WaitP99Ms)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
