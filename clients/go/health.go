package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// health.go: whether the lock service answers (rule 14 of docs/clients.md). Every answer of a
// node (a reply, a connection's handshake) and every failure to get one is noted per node;
// a wait is watched by PING on another connection; a Locker gives up on a node that has not
// answered for its unavailability bound.

// health is what the Locker knows of one node's answers.
type health struct {
	mu      sync.Mutex
	heard   time.Time // the node's last answer
	failing time.Time // the first failure since then (zero: none)
}

// health returns the record of the node at addr.
func (l *Locker) health(addr string) *health {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.nodes[addr]
	if h == nil {
		if l.nodes == nil {
			l.nodes = map[string]*health{}
		}
		h = &health{}
		l.nodes[addr] = h
	}
	return h
}

func (h *health) answered() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.heard, h.failing = time.Now(), time.Time{}
}

// failed notes a failure that began at since; it returns when the failures began.
func (h *health) failed(since time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failing.IsZero() {
		h.failing = since
	}
	return h.failing
}

// lastHeard is the node's last answer, or from when it is no later than.
func (h *health) lastHeard(from time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.heard.After(from) {
		return h.heard
	}
	return from
}

// doubtful reports whether the node has not answered since its last failure, or ever.
func (h *health) doubtful() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.heard.IsZero() || !h.failing.IsZero()
}

// note records what err says of the node at addr: an answer (nil, or an error reply), or a
// failure to get one that began at sent.
func (l *Locker) note(addr string, err error, sent time.Time) {
	h := l.health(addr)
	if isFailure(err) {
		h.failed(sent)
	} else {
		h.answered()
	}
}

// isFailure reports whether err means that the node did not answer as Redis with the module
// (see noAnswer).
func isFailure(err error) bool { return classify(err) == noAnswer }

// What an error says of the node it came from.
type kind int

const (
	answer   kind = iota // nil, or an answer of the module or of Redis: the call's outcome
	notHere              // an error reply: this node cannot serve the key now (demoted, loading, the slot moved)
	noAnswer             // the network, a timeout, a reply that is not RESP, an unknown LOCK command
)

// classify is the one reading of errors: what err says of the node (see kind).
func classify(err error) kind {
	var unavailable *UnavailableError
	var reply redis.Error
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(err, ErrNotObtained),
		errors.Is(err, ErrDeadlock), errors.Is(err, ErrStale), errors.Is(err, errUnsupported):
		return answer
	case errors.As(err, &unavailable):
		return noAnswer
	case errors.As(err, &reply) && isAny(err, codeUnknownModule):
		return noAnswer
	case errors.As(err, &reply) && isRetryableReply(err):
		return notHere
	case errors.As(err, &reply):
		return answer
	}
	return noAnswer
}

// unavailable is err as the error of a service that did not answer, for a call whose
// failures began at since: an *UnavailableError once the bound has passed (or when retrying
// is not an option: retry false), else nil (the caller retries). A reply of rule 19 (the
// node cannot serve the key now) is the same, counted from refused, the call's first one.
// Other errors pass unchanged.
func (l *Locker) unavailable(addr string, err error, since, refused time.Time, retry bool) error {
	switch classify(err) {
	case answer:
		return err
	case notHere:
		since = refused
	default:
		since = l.health(addr).failed(since)
	}
	if retry && time.Since(since) < l.bound && !isAny(err, codeUnknownModule) {
		return nil
	}
	return l.unavailableAt(addr, err)
}

// unavailableAt is the *UnavailableError of addr for cause (itself when it is one already).
func (l *Locker) unavailableAt(addr string, cause error) error {
	var already *UnavailableError
	if errors.As(cause, &already) {
		return cause
	}
	if isAny(cause, codeUnknownModule) {
		cause = fmt.Errorf("%w: %w", errNoModule, cause)
	}
	return &UnavailableError{Addr: addr, Err: cause}
}

// errNoModule: the server answers, but without the redis-lock module's commands.
var errNoModule = errors.New("the redis-lock module is not loaded")

// ping sends PING to the node of base on a connection of its own, answered within timeout
// (or ctx: then nothing is noted).
func (l *Locker) ping(ctx context.Context, base *redis.Options, timeout time.Duration) error {
	in, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := time.Now()
	c, err := l.connect(in, base, timeout, false)
	if err == nil {
		err = c.Ping(in).Err()
		_ = c.Close()
	}
	if ctx.Err() == nil {
		l.note(base.Addr, err, sent)
	}
	return err
}

// silent tells a wait that ctx ended without a reply (started at start) whether the node
// answered meanwhile: nil if it did (or does now, to a PING), else why not.
func (l *Locker) silent(ctx context.Context, base *redis.Options, start time.Time, why error) error {
	if l.health(base.Addr).lastHeard(start).After(start) {
		return nil
	}
	err := l.ping(context.WithoutCancel(ctx), base, l.grace())
	if err == nil {
		return nil
	}
	if why == nil || errors.Is(why, context.Canceled) || errors.Is(why, context.DeadlineExceeded) {
		why = err
	}
	return l.unavailableAt(base.Addr, why)
}

// watchServer watches the node of base while a wait that began at start lasts (until ctx
// ends or stop is called): whenever it has not been heard from for half the bound it is sent PING,
// and once it has been silent for the bound, end is called with an *UnavailableError (which
// closes the waiting connection).
func (l *Locker) watchServer(ctx context.Context, base *redis.Options, start time.Time, end context.CancelCauseFunc) (stop func()) {
	h := l.health(base.Addr)
	every := l.bound / 2
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if quiet := time.Since(h.lastHeard(start)); quiet < every {
				t.Reset(every - quiet)
				continue
			}
			err := l.ping(ctx, base, max(l.bound-time.Since(h.lastHeard(start)), retryPause))
			switch {
			case err == nil || ctx.Err() != nil:
				t.Reset(every)
			case time.Since(h.lastHeard(start)) >= l.bound:
				end(l.unavailableAt(base.Addr, err))
				return
			default:
				t.Reset(retryPause)
			}
		}
	}()
	return func() {
		cancel()
		<-finished
	}
}
