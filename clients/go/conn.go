package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// conn.go: connections of their own, outside the client's pool (waits, session holds and
// watchdogs), and what an error reply means.

// dedicated returns a connection of its own to the master that serves key: a go-redis Client
// with a pool of one connection, made from the options of the caller's client (for a
// FailoverClient, its dialer asks the Sentinels for the master on every connect; in a
// cluster, the options of the node that serves key's slot). It takes nothing from the
// caller's pool, so a busy pool cannot starve it, and closing it closes the connection:
// nothing it carried ever goes back to a pool. timeout bounds each read and write (0: none,
// for a wait the server ends itself).
func (l *Locker) dedicated(ctx context.Context, key string, timeout time.Duration) (*redis.Client, error) {
	var base *redis.Options
	switch c := l.client.(type) {
	case *redis.Client:
		base = c.Options()
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		base = node.Options()
	default:
		return nil, fmt.Errorf("redislock: a %T cannot make connections of its own: waits, "+
			"sessions, durable grants and the watchdog need a *redis.Client (standalone or "+
			"NewFailoverClient) or a *redis.ClusterClient", l.client)
	}
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
	return redis.NewClient(&opt), nil
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
		errors.Is(err, ErrDeadlock) || errors.Is(err, ErrStale) ||
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
