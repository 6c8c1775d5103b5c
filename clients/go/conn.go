package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// conn.go: connections of their own, outside the client's pool (waits, session holds and
// the renewal loop's), and what an error reply means.

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

// errSessionClosed: a session hold's connection broke (it is not made again).
var errSessionClosed = errors.New("connection lost (a session's is not made again)")

// closedConn is what a session's client dials after its connection broke: every read and
// write fails with errSessionClosed.
type closedConn struct{}

func (closedConn) Read([]byte) (int, error)         { return 0, errSessionClosed }
func (closedConn) Write([]byte) (int, error)        { return 0, errSessionClosed }
func (closedConn) Close() error                     { return nil }
func (closedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (closedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (closedConn) SetDeadline(time.Time) error      { return nil }
func (closedConn) SetReadDeadline(time.Time) error  { return nil }
func (closedConn) SetWriteDeadline(time.Time) error { return nil }

// errUnsupported: the Locker's client is of a kind this package cannot make connections from.
var errUnsupported = errors.New("redislock: unsupported client")

// connect is a connection of its own to the node of base (see own), dialed here first: a
// refused dial comes back as an error, where go-redis's pool would log it (each time: the
// log is the caller's, and a server that is down is an answer this package gives itself).
// A session's (once) is never made again: its hold ended with it.
func (l *Locker) connect(ctx context.Context, base *redis.Options, timeout time.Duration, once bool) (*redis.Client, error) {
	conn, err := base.Dialer(ctx, base.Network, base.Addr)
	if err != nil {
		return nil, err
	}
	return l.own(base, timeout, conn, once), nil
}

// own is a go-redis Client with a pool of one connection, first on conn (later ones, after a
// broken link, are dialed by base's dialer; none when once). Its handshake counts as the
// node's answer.
// timeout bounds each read and write, and so does the context's deadline (0: neither, for
// waits, which the server ends itself, or the context by closing the connection).
func (l *Locker) own(base *redis.Options, timeout time.Duration, conn net.Conn, once bool) *redis.Client {
	opt := *base
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 1, 1
	opt.PipelinePoolSize = -1
	opt.MaxRetries = -1 // retried here, with the same owner, where that is safe
	opt.DialerRetries = 1
	opt.ContextTimeoutEnabled = timeout > 0
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
	var first sync.Mutex
	dial := base.Dialer
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		first.Lock()
		c := conn
		conn = nil
		first.Unlock()
		switch {
		case c != nil:
			return c, nil
		case once:
			return closedConn{}, nil // a failed dial would be logged, and probed again
		}
		return dial(ctx, network, addr)
	}
	h, onConnect := l.health(base.Addr), base.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		h.answered()
		if onConnect != nil {
			return onConnect(ctx, cn)
		}
		return nil
	}
	return redis.NewClient(&opt)
}

// where is the address of the lock service when the node that serves a key is not known
// (its lookup failed): the client's address, or a cluster's seed addresses.
func (l *Locker) where() string {
	switch c := l.client.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T", l.client)
}

// A waitConn is a connection of its own for waits (and the session hold it may receive).
type waitConn struct {
	*redis.Client
	base *redis.Options // the options of the node it was made for: where it goes back to when kept
	once sync.Once
}

func (c *waitConn) close() { c.once.Do(func() { _ = c.Client.Close() }) }

// waitConn returns a kept connection to key's master, or a new one (dialed within ctx and
// the unavailability bound), and the master's options. A session hold gets a new one: it is
// closed with the hold.
func (l *Locker) waitConn(ctx context.Context, key string, session bool) (*waitConn, *redis.Options, error) {
	base, err := l.node(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if !session {
		l.mu.Lock()
		kept := l.idle[base.Addr]
		if n := len(kept); n > 0 {
			c := kept[n-1]
			l.idle[base.Addr] = kept[:n-1]
			l.mu.Unlock()
			return c, base, nil
		}
		l.mu.Unlock()
	}
	dial, cancel := context.WithTimeout(ctx, l.bound)
	defer cancel()
	c, err := l.connect(dial, base, 0, session)
	if err != nil {
		return nil, base, err
	}
	return &waitConn{Client: c, base: base}, base, nil
}

// done is the end of a wait on c that ended with err: a connection whose reply came (a grant,
// not granted, an error reply of this node) is kept for the next wait, up to the client's pool
// size per node; any other is closed.
func (l *Locker) done(c *waitConn, err error) {
	answered := classify(err) == answer && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded)
	l.mu.Lock()
	if answered && !l.closed && len(l.idle[c.base.Addr]) < c.base.PoolSize {
		if l.idle == nil {
			l.idle = map[string][]*waitConn{}
		}
		l.idle[c.base.Addr] = append(l.idle[c.base.Addr], c)
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
	if c, ok := l.client.(*redis.ClusterClient); ok && isRetryableReply(err) {
		c.ReloadState(ctx)
	}
}

// retryable reports whether a new connection may get an answer where err came: the link
// broke or the node did not answer (not a node without the module), or the node cannot serve
// the key now (see notHere). Then the watchdog renews on a new connection.
func retryable(err error) bool {
	k := classify(err)
	return k == notHere || k == noAnswer && !isAny(err, codeUnknownModule)
}

// onceCmd is a command go-redis must not send twice (a guarded write or a release may have
// run).
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// once sends args through c as a onceCmd.
func once(ctx context.Context, c redis.UniversalClient, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	_ = c.Process(ctx, onceCmd{cmd})
	return cmd
}
