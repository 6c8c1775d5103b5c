package redislock_test

// The inventory of the field reports through Fenced, per database: 4 worker processes (this
// test binary, re-executed) sell a stock of 100, one unit per hold: Obtain with WAIT, then in
// Fenced read the stock, stop at 0, write it minus one and record the sale. Holders are frozen
// with SIGSTOP past their 300 ms lease: two workers stop themselves inside their transaction,
// after the read of their 3rd sale, and the test stops workers at random moments (8); it resumes
// every worker stopped for 2 leases. A frozen holder's transaction keeps the fence row, so the
// next holder waits and then reads its write; a holder frozen before its transaction finds a
// newer fence and gets ErrStale. Sold + left = 100, whatever the scheduler did.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

// fenceWorkerEnv carries a fenceWorker as JSON to a worker process.
const fenceWorkerEnv = "REDISLOCK_GO_FENCE_WORKER"

// A fenceWorker is what a worker process needs: its name, the Redis server, the database and
// the shop's tables, and the sale after whose read it stops itself (0: none).
type fenceWorker struct {
	Name                      string
	Redis                     string
	DB                        database
	Stock, Sales, Fences, Key string
	PauseAt                   int
}

// fenceWorkerMain is a worker process: it sells until the stock is empty and prints
// "sold stale retried".
func fenceWorkerMain() int {
	var w fenceWorker
	if err := json.Unmarshal([]byte(os.Getenv(fenceWorkerEnv)), &w); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := redis.NewClient(&redis.Options{Addr: w.Redis})
	defer func() { _ = r.Close() }()
	l := redislock.New(r)
	defer func() { _ = l.Close() }()
	db, err := sql.Open(w.DB.Driver, w.DB.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = db.Close() }()
	s := &shop{db: &testDB{db, &w.DB}, stock: w.Stock, sales: w.Sales, fences: w.Fences, key: w.Key}
	sold, stale, retried, err := w.sell(ctx, l, s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", w.Name, err)
		return 1
	}
	fmt.Println(sold, stale, retried)
	return 0
}

// sell sells one unit per hold until it reads an empty stock: how many it sold, how many of
// its holds were refused as stale, how many transactions the database ended for a conflict
// (rolled back by Fenced, run again under a new hold).
func (w *fenceWorker) sell(ctx context.Context, l *redislock.Locker, s *shop) (sold, stale, retried int, err error) {
	reads := 0
	for {
		lock, err := l.Obtain(ctx, s.key, sellerLease)
		if err != nil {
			return sold, stale, retried, err
		}
		empty := false
		err = redislock.Fenced(ctx, s.db.DB, lock, func(tx *sql.Tx) error {
			qty, err := s.read(ctx, tx)
			if err != nil || qty <= 0 {
				empty = true
				return err
			}
			if reads++; reads == w.PauseAt {
				// Frozen inside the transaction, fence raised, past the lease: the test
				// resumes this process 2 leases later.
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			}
			time.Sleep(5 * time.Millisecond) // the test may stop this process here too
			return s.sell(ctx, tx, w.Name, qty)
		}, s.opts()...)
		_, _ = lock.Release(ctx)
		switch {
		case err == nil && empty:
			return sold, stale, retried, nil
		case err == nil:
			sold++
		case errors.Is(err, redislock.ErrStale):
			stale++
		case retryable(err):
			retried++
		default:
			return sold, stale, retried, err
		}
	}
}

// procState is the state letter of /proc/PID/stat (T: stopped), or 0.
func procState(pid int) byte {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}

func TestFencedInventory100InStock4ProcessesPausedHoldersNothingOversold(t *testing.T) {
	eachDB(t, func(t *testing.T, db *testDB) {
		s := newShop(t, db)
		srv := server(t)
		workers := make([]*exec.Cmd, 4)
		outs, errs := make([]*bytes.Buffer, len(workers)), make([]*bytes.Buffer, len(workers))
		for i := range workers {
			w := fenceWorker{Name: fmt.Sprintf("worker%d", i), Redis: srv.Addr(), DB: *db.database,
				Stock: s.stock, Sales: s.sales, Fences: s.fences, Key: s.key}
			if i < 2 {
				w.PauseAt = 3
			}
			config, err := json.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			outs[i], errs[i] = &bytes.Buffer{}, &bytes.Buffer{}
			workers[i] = exec.Command(os.Args[0], "-test.run=^$")
			workers[i].Env = append(os.Environ(), fenceWorkerEnv+"="+string(config))
			workers[i].Stdout, workers[i].Stderr = outs[i], errs[i]
			if err := workers[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		exited := make(chan int, len(workers))
		for i, w := range workers {
			go func() { _ = w.Wait(); exited <- i }()
		}
		done := make([]bool, len(workers))
		alive := len(workers)
		t.Cleanup(func() {
			for i, w := range workers {
				if !done[i] {
					_ = w.Process.Signal(syscall.SIGCONT)
					_ = w.Process.Kill()
					<-exited
				}
			}
		})

		// Every 20 ms: resume a worker stopped for 2 leases (in state T: stopped by itself or
		// by this loop); every 100 to 300 ms, while fewer than 2 are stopped, stop one at random,
		// 8 times (a stopped holder stalls the sales for 2 leases: more stops, a longer soak).
		stopped := make([]time.Time, len(workers))
		pauses, randomStops, rng := 0, 0, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 30))
		nextStop := time.Now().Add(100 * time.Millisecond)
		deadline := time.Now().Add(45 * time.Second)
		for alive > 0 {
			select {
			case i := <-exited:
				done[i] = true
				alive--
				continue
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("the workers did not finish within 45 s (stock left %d)", s.left(t))
			}
			nStopped := 0
			for i, w := range workers {
				if done[i] || procState(w.Process.Pid) != 'T' {
					stopped[i] = time.Time{}
					continue
				}
				nStopped++
				if stopped[i].IsZero() {
					stopped[i] = time.Now()
					pauses++
				} else if time.Since(stopped[i]) >= 2*sellerLease {
					_ = w.Process.Signal(syscall.SIGCONT)
				}
			}
			if nStopped < 2 && randomStops < 8 && time.Now().After(nextStop) {
				i := rng.IntN(len(workers))
				if !done[i] && stopped[i].IsZero() && workers[i].Process.Signal(syscall.SIGSTOP) == nil {
					randomStops++
				}
				nextStop = time.Now().Add(time.Duration(100+rng.IntN(200)) * time.Millisecond)
			}
		}

		sold, stale, retried := 0, 0, 0
		for i, w := range workers {
			var n, st, re int
			if _, err := fmt.Sscan(outs[i].String(), &n, &st, &re); err != nil || !w.ProcessState.Success() {
				t.Fatalf("worker %d: %v (%v): %s%s", i, w.ProcessState, err, outs[i], errs[i])
			}
			sold, stale, retried = sold+n, stale+st, retried+re
		}
		left, rows := s.left(t), s.sold(t)
		if rows+left != 100 || left < 0 || sold != rows || left != 0 {
			t.Fatalf("%d sales recorded, %d left, the workers report %d sold; want 100 sold and 0 left",
				rows, left, sold)
		}
		t.Logf("%s: 100 sold; %d pauses, %d holds refused as stale, %d transactions run again",
			db.Kind, pauses, stale, retried)
	})
}
