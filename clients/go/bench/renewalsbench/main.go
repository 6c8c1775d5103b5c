// Command renewalsbench keeps N holds alive with one Locker's renewal loop and prints what it
// cost, for scripts/bench_renewals.py (through the wrapper clients/go/bench/renewals):
//
//	renewals --port P --holds N --ttl-ms T --seconds S
//
// It connects to 127.0.0.1:P (a server with the module), sends one command, reads
// connected_clients (INFO clients, on a connection of its own kept open for the run), takes N
// holds (renew:<i>, the watchdog on) one after the other, samples connected_clients every second
// for S seconds keeping the most, releases hold 0, waits two renewal intervals, checks that no
// other hold was lost and that the server still has the N-1 others (LOCK.FENCE), releases them
// and prints one JSON line. A renewal's lag is its reply's arrival minus when it fell due (the
// last success's sending + ttl/3), seen through the package's internal hook.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/renewlag"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

type lagMs struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type result struct {
	Client            string `json:"client"`
	Holds             int    `json:"holds"`
	ConnectionsBefore int    `json:"connections_before"`
	ConnectionsAfter  int    `json:"connections_after"`
	Lost              int    `json:"lost"`
	Lag               lagMs  `json:"lag_ms"`
	Renewals          int    `json:"renewals"`
	OthersLive        bool   `json:"others_live_after_release"`
}

// lags keeps every renewal's lag.
type lags struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *lags) add(d time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d)
	l.mu.Unlock()
}

// summary is the p50, p99 and max in ms, and how many.
func (l *lags) summary() (lagMs, int) {
	l.mu.Lock()
	all := slices.Clone(l.all)
	l.mu.Unlock()
	if len(all) == 0 {
		return lagMs{}, 0
	}
	slices.Sort(all)
	at := func(q float64) float64 {
		return float64(all[min(len(all)-1, int(q*float64(len(all))))].Microseconds()) / 1000
	}
	return lagMs{P50: at(0.50), P99: at(0.99), Max: at(1)}, len(all)
}

func main() {
	port := flag.Int("port", 6379, "the server's port on 127.0.0.1")
	holds := flag.Int("holds", 1000, "how many holds")
	ttlMs := flag.Int("ttl-ms", 3000, "each hold's lease, ms")
	seconds := flag.Int("seconds", 30, "how long the holds are kept")
	flag.Parse()
	r, err := run("127.0.0.1:"+strconv.Itoa(*port), *holds, time.Duration(*ttlMs)*time.Millisecond,
		time.Duration(*seconds)*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "renewals:", err)
		os.Exit(1)
	}
	line, _ := json.Marshal(r)
	fmt.Println(string(line))
}

func run(addr string, n int, ttl, hold time.Duration) (*result, error) {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	watcher := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer watcher.Close()
	clients := func() int {
		n, _ := strconv.Atoi(testserver.Info(ctx, watcher, "clients", "connected_clients"))
		return n
	}
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, err
	}
	res := &result{Client: "go", Holds: n, ConnectionsBefore: clients()}
	seen := &lags{}
	renewlag.Observe(seen.add)
	defer renewlag.Observe(nil)
	locker := redislock.New(client)
	defer locker.Close()
	locks := make([]*redislock.Lock, n)
	for i := range locks {
		lock, err := locker.Obtain(ctx, fmt.Sprintf("renew:%d", i), ttl, redislock.WithWait(0))
		if err != nil {
			return nil, fmt.Errorf("hold %d: %w", i, err)
		}
		locks[i] = lock
	}
	res.ConnectionsAfter = res.ConnectionsBefore
	for end := time.Now().Add(hold); time.Now().Before(end); {
		time.Sleep(time.Second)
		res.ConnectionsAfter = max(res.ConnectionsAfter, clients())
	}
	if _, err := locks[0].Release(ctx); err != nil {
		return nil, err
	}
	time.Sleep(2 * ttl / 3) // two renewal intervals
	live, err := held(ctx, watcher, locks[1:])
	if err != nil {
		return nil, err
	}
	for _, lock := range locks[1:] {
		if lock.Err() != nil {
			res.Lost++
		}
	}
	res.OthersLive = live == n-1 && res.Lost == 0
	res.Lag, res.Renewals = seen.summary()
	for _, lock := range locks[1:] {
		_, _ = lock.Release(ctx)
	}
	return res, nil
}

// held is how many of locks the server has (LOCK.FENCE answers their token), asked in
// pipelines of 1,000.
func held(ctx context.Context, c *redis.Client, locks []*redislock.Lock) (int, error) {
	live := 0
	for chunk := range slices.Chunk(locks, 1000) {
		pipe := c.Pipeline()
		cmds := make([]*redis.IntCmd, len(chunk))
		for i, lock := range chunk {
			cmds[i] = redis.NewIntCmd(ctx, "LOCK.FENCE", lock.Key())
			_ = pipe.Process(ctx, cmds[i])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
		for i, lock := range chunk {
			if cmds[i].Val() == lock.Token() {
				live++
			}
		}
	}
	return live, nil
}
