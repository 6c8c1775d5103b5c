package redislock_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

// addr is the server the examples run against, started by TestMain.
var addr string

// TestMain runs the helper processes of the inventory tests (the test binary re-executed), or
// the tests and examples: on a server of their own each, the examples on one started here, and
// the databases of the fenced-transaction tests, started when first needed and stopped here.
// No goroutine may outlive them (goleak): every watchdog, wait and connection has ended.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	if os.Getenv(fenceWorkerEnv) != "" {
		os.Exit(fenceWorkerMain())
	}
	if os.Getenv(candidateEnv) != "" {
		os.Exit(candidateMain())
	}
	if os.Getenv(observerEnv) != "" {
		os.Exit(observerMain())
	}
	flag.Parse()
	if !testing.Verbose() {
		redis.SetLogger(quiet{}) // go-redis logs each failed dial of the failover test
	}
	s, err := testserver.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addr = s.Addr()
	code := m.Run()
	s.Stop()
	stopDatabases()
	if code == 0 {
		if err := leaked(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leaked is goleak.Find, giving goroutines that end on their own 3 s to do so (go-redis
// probes a server it failed to dial once a second, until its client is closed).
func leaked(opts ...goleak.Option) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// server starts a server for one test, stopped at its end.
func server(t testing.TB, extra ...string) *testserver.Server {
	t.Helper()
	s, err := testserver.Start(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// client is a client of s with opts applied, closed at the test's end.
func client(t testing.TB, s *testserver.Server, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// eventually fails the test unless cond holds within limit.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !testserver.Eventually(limit, cond) {
		t.Fatalf("not within %v: %s", limit, what)
	}
}

func calls(c redis.UniversalClient, command string) int {
	return testserver.Calls(context.Background(), c, command)
}

func blocked(c redis.UniversalClient) string {
	return testserver.Info(context.Background(), c, "clients", "blocked_clients")
}

// info is LOCK.INFO key as a map (nil when the lock is free).
func info(t testing.TB, c redis.UniversalClient, key string) map[string]any {
	t.Helper()
	v, err := c.Do(context.Background(), "LOCK.INFO", key).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return asMap(v)
}

// asMap reads a map reply, RESP3 map or RESP2 flat array.
func asMap(v any) map[string]any {
	out := map[string]any{}
	switch v := v.(type) {
	case map[any]any:
		for k, x := range v {
			out[fmt.Sprint(k)] = x
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			out[fmt.Sprint(v[i])] = v[i+1]
		}
	}
	return out
}

// waiters is how many clients wait in key's queue, as LOCK.INFO says.
func waiters(t testing.TB, c redis.UniversalClient, key string) int64 {
	t.Helper()
	m := info(t, c, key)
	if m == nil {
		return 0
	}
	n, _ := m["waiters"].(int64)
	return n
}

// fence is LOCK.FENCE key: the live exclusive token, 0 when none.
func fence(c redis.UniversalClient, key string) int64 {
	n, _ := c.Do(context.Background(), "LOCK.FENCE", key).Int64()
	return n
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
