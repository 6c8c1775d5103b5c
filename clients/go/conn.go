package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// conn.go: connections of their own, outside the client's pool (waits, session holds and
// watchdogs), and what an error reply means.

// node returns the options of the master that serves key (the caller's client's own, or in a
// cluster those of the node that serves key's slot).
func (l *Locker) node(ctx context.Context, key string) (*redis.Options, error) {
	switch c := l.client.(type) {
	case *redis.Client:
		return c.Options(), nil
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Options(), nil
	}
	return nil, fmt.Errorf("%w: a %T cannot make connections of its own: waits, sessions, "+
		"durable grants and the watchdog need a *redis.Client (standalone or "+
		"NewFailoverClient) or a *redis.ClusterClient", errUnsupported, l.client)
}

// errUnsupported: the Locker's client is of a kind this package cannot make connections from.
var errUnsupported = errors.New("redislock: unsupported client")

// dedicated returns a connection of its own to the master that serves key: a go-redis Client
// with a pool of one connection, made from the options of the caller's client (for a
// FailoverClient, its dialer asks the Sentinels for the master on every connect). It takes
// nothing from the caller's pool, so a busy pool cannot starve it, and closing it closes the
// connection. timeout bounds each read and write (0: none, for waits, which the server ends
// itself, or the context).
func (l *Locker) dedicated(ctx context.Context, key string, timeout time.Duration) (*redis.Client, error) {
	base, err := l.node(ctx, key)
	if err != nil {
		return nil, err
	}
	return own(base, timeout), nil
}

func own(base *redis.Options, timeout time.Duration) *redis.Client {
	opt := *base
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 1, 1
	opt.PipelinePoolSize = -1
	opt.MaxRetries = -1 // retried here, with the same owner, where that is safe
	opt.ContextTimeoutEnabled = false
	opt.ReadTimeout, opt.WriteTimeout = -1, -1
	if timeout > 0 {
		opt.ReadTimeout, opt.WriteTimeout = timeout, timeout
		opt.DialTimeout = min(opt.DialTimeout, timeout)
	}
	// An idle session connection must live as long as its hold.
	opt.ConnMaxIdleTime, opt.ConnMaxLifetime = -1, 0
	opt.Limiter = nil
	opt.ClientSideCache, opt.ClientSideCacheConfig = nil, nil
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&opt)
}

// A waitConn is a connection of its own for waits (and the session hold it may receive).
type waitConn struct {
	*redis.Client
	node string // the address it was made for: where it goes back to when kept
	keep int    // how many the Locker keeps for that node: the client's pool size
	once sync.Once
}

func (c *waitConn) close() { c.once.Do(func() { _ = c.Client.Close() }) }

// waitConn returns a kept connection to key's master, or a new one. A session hold gets a new
// one: it is closed with the hold.
func (l *Locker) waitConn(ctx context.Context, key string, session bool) (*waitConn, error) {
	base, err := l.node(ctx, key)
	if err != nil {
		return nil, err
	}
	if !session {
		l.mu.Lock()
		kept := l.idle[base.Addr]
		if n := len(kept); n > 0 {
			c := kept[n-1]
			l.idle[base.Addr] = kept[:n-1]
			l.mu.Unlock()
			return c, nil
		}
		l.mu.Unlock()
	}
	return &waitConn{Client: own(base, 0), node: base.Addr, keep: base.PoolSize}, nil
}

// done is the end of a wait on c that ended with err: a connection whose reply came (a grant,
// not granted, an error reply of this node) is kept for the next wait, up to the client's pool
// size per node; any other is closed.
func (l *Locker) done(c *waitConn, err error) {
	var reply redis.Error
	answered := err == nil || errors.Is(err, ErrNotObtained) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded) || errors.As(err, &reply) && !retryable(err)
	l.mu.Lock()
	if answered && !l.closed && len(l.idle[c.node]) < c.keep {
		if l.idle == nil {
			l.idle = map[string][]*waitConn{}
		}
		l.idle[c.node] = append(l.idle[c.node], c)
		c = nil
	}
	l.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// Close closes the connections the Locker keeps for waits (not the client, nor the
// connections of live holds). Waits after Close make new connections and keep none.
func (l *Locker) Close() error {
	l.mu.Lock()
	idle := l.idle
	l.idle, l.closed = nil, true
	l.mu.Unlock()
	for _, kept := range idle {
		for _, c := range kept {
			c.close()
		}
	}
	return nil
}

// reconnect prepares the next connection after err: in a cluster whose slot moved, the
// client's map of slots is reloaded.
func (l *Locker) reconnect(ctx context.Context, err error) {
	if c, ok := l.client.(*redis.ClusterClient); ok && isAny(err, "MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN") {
		c.ReloadState(ctx)
	}
}

// retryable reports whether err means that the link broke or that this node cannot serve the
// key now (it is down, was demoted, is loading, or the key's slot moved): then a wait asks
// again, with the same owner, and the watchdog renews on a new connection. A server's other
// error replies are answers.
func retryable(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, ErrNotObtained) ||
		errors.Is(err, ErrDeadlock) || errors.Is(err, ErrStale) || errors.Is(err, errUnsupported) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return isAny(err, "READONLY", "UNBLOCKED", "LOADING", "MASTERDOWN",
			"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")
	}
	return true // the network, a refused connection, no master known to the Sentinels yet
}

// isAny reports whether err is an error reply starting with one of the codes.
func isAny(err error, codes ...string) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	for _, code := range codes {
		if strings.HasPrefix(reply.Error(), code+" ") || reply.Error() == code {
			return true
		}
	}
	return false
}

// onceCmd is a command go-redis must not send twice (a guarded write may have run).
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }
