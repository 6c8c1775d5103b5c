package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// short.go: the short commands (a try, a release, a guarded write, an extend), sent through
// the caller's pool and answered within the Locker's unavailability bound (rule 14).

// pooled runs do, one command through the caller's pool (on short's client), and answers
// within the Locker's bound: when the command has no answer by then, it is left to end in the
// background, which it does at the bound (short's timeouts), and the error matches
// ErrUnavailable. A reply of rule 19 (the node cannot serve the key now: a moved slot, a
// demoted master) is asked again after a pause, a cluster's map of slots reloaded, until the
// bound: it was not run. When the node of key has not answered since its last failure (or
// ever), it is sent PING first on a connection of its own: a node that is down is then
// answered as unavailable without the caller's pool, which would log each failed dial.
func pooled[T any](ctx context.Context, l *Locker, key string, do func(context.Context, redis.UniversalClient) (T, error)) (T, error) {
	var zero T
	sent := time.Now()
	ctx, cancel := context.WithTimeout(ctx, l.bound)
	defer cancel()
	base, err := l.node(ctx, key)
	addr := l.addr(base)
	if err == nil && l.health(addr).doubtful() {
		if err := l.ping(ctx, base, l.bound); err != nil {
			return zero, l.unavailableAt(addr, err)
		}
	}
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := asked(ctx, l, key, do)
		done <- answer{v, err}
	}()
	var got answer
	select {
	case got = <-done:
	case <-ctx.Done():
		got.err = fmt.Errorf("no answer within %v: %w", time.Since(sent).Round(time.Millisecond), ctx.Err())
	}
	l.note(addr, got.err, sent)
	if isFailure(got.err) || classify(got.err) == notHere {
		return zero, l.unavailableAt(addr, got.err)
	}
	return got.v, got.err
}

// asked runs do on short's client until it gets an answer that is not a reply of rule 19, or
// ctx ends (then the last reply).
func asked[T any](ctx context.Context, l *Locker, key string, do func(context.Context, redis.UniversalClient) (T, error)) (T, error) {
	for {
		c, err := l.short(ctx, key)
		var v T
		if err == nil {
			v, err = do(ctx, c)
		}
		if classify(err) != notHere || sleep(ctx, retryPause) != nil {
			return v, err
		}
		l.reconnect(ctx, err)
	}
}

// short is the client for one short command (see pooled) to the master of key, sharing the
// caller's pool (in a cluster, the pool of the node that serves key's slot): its reads and
// writes are bounded by what is left of ctx's deadline (the unavailability bound), so that a
// command left to end in the background after the bound does end then, whatever the caller's
// client's timeouts. Made per command (about 6 µs): it has the hooks the caller's client
// (or node) has now.
func (l *Locker) short(ctx context.Context, key string) (redis.UniversalClient, error) {
	var c *redis.Client
	switch v := l.client.(type) {
	case *redis.Client:
		c = v
	case *redis.ClusterClient:
		node, err := v.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		c = node
	default:
		return l.client, nil
	}
	timeout := l.bound
	if deadline, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(deadline), time.Millisecond)
	}
	if own := c.Options().ReadTimeout; own > 0 && own < timeout {
		timeout = own
	}
	return c.WithTimeout(timeout), nil
}
