package redislock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// multi.go: lock sets (rule 23 of docs/clients.md). A set is granted in one step
// (LOCK.MACQUIRE) and is then a group of member holds, one *Lock per key in the Locker's one
// renewal loop (their renewals fall due together and go in the same pipelines): the set is
// lost when any member is, and the members still held are then released (LOCK.MRELEASE).

// A MultiLock is a set of locks granted together (ObtainAll): one owner, one ttl, one token per
// key. Its methods are safe for concurrent use. Release it once the work is done.
type MultiLock struct {
	locker  *Locker
	keys    []string
	owner   string
	members []*Lock
	byKey   map[string]*Lock

	mu      sync.Mutex
	phase   phase
	err     error         // why the set was lost
	lost    chan struct{} // closed once, when the set is lost
	extends turn          // its extends, one at a time
}

// ObtainAll takes holds on every one of keys in one step, or on none (LOCK.MACQUIRE): every
// key exclusive (or every key shared, WithShared), with one owner and one ttl, each renewed by
// the Locker's watchdog until Release. It waits as Obtain does (WithWait, the context), in every
// key's queue at once: two sets of the same keys named in opposite orders never deadlock, so
// the keys need no sorting. Rules and errors are Obtain's, and: no keys, a key twice or more
// than 64 keys, WithPermits, WithSession and WithReplicas are ErrInvalidArgument (before
// anything is sent); an owner (WithOwner) that holds some of the keys while others are busy
// gets ErrDeadlock when it would wait; in a cluster the keys must share one slot (a hash tag,
// {account}:1 {account}:2), else the error matches ErrCrossSlot.
func (l *Locker) ObtainAll(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*MultiLock, error) {
	if l.badOption != nil {
		return nil, l.badOption
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.checkSet(keys, ttl); err != nil {
		return nil, err
	}
	keys = append([]string(nil), keys...)
	owner := o.owner
	if owner == "" {
		owner = newOwner()
	}
	g := &grant{
		key:   keys[0],
		args:  func(wait int64) []any { return o.macquireArgs(keys, owner, ttl, wait) },
		parse: func(cmd *redis.Cmd) ([]int64, error) { return parseTokens(cmd, len(keys)) },
		giveBack: func(ctx context.Context, _ []int64) {
			_, _ = l.mrelease(context.WithoutCancel(ctx), keys, owner)
		},
	}
	tokens, conn, start, err := l.acquire(ctx, g, &o)
	if err != nil {
		return nil, err
	}
	if conn != nil {
		l.done(conn, nil)
	}
	m := &MultiLock{locker: l, keys: keys, owner: owner, byKey: make(map[string]*Lock, len(keys)),
		lost: make(chan struct{}), extends: newTurn()}
	for i, key := range keys {
		member := l.hold(key, owner, tokens[i], ttl, start, nil, !o.noWatchdog)
		m.members = append(m.members, member)
		m.byKey[key] = member
	}
	for _, member := range m.members {
		member.whenLost(m.memberLost)
	}
	return m, nil
}

// checkSet checks the arguments of ObtainAll.
func (o *options) checkSet(keys []string, ttl time.Duration) error {
	if err := o.check(ttl); err != nil {
		return err
	}
	switch {
	case len(keys) == 0:
		return invalid("ObtainAll: no keys")
	case len(keys) > maxSetSize:
		return invalid("ObtainAll: %d keys, at most %d", len(keys), maxSetSize)
	case o.limit != 0:
		return invalid("ObtainAll takes exclusive or shared locks (WithShared), not WithPermits")
	case o.session:
		return invalid("ObtainAll does not take WithSession")
	case o.replicas != 0:
		return invalid("ObtainAll does not take WithReplicas")
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, twice := seen[k]; twice {
			return invalid("ObtainAll: the key %q appears twice", k)
		}
		seen[k] = struct{}{}
	}
	return nil
}

// mrelease sends LOCK.MRELEASE once through the client's pool (see pooled; not retried, as a
// release): how many of keys owner held and released.
func (l *Locker) mrelease(ctx context.Context, keys []string, owner string) (int64, error) {
	return pooled(ctx, l, keys[0], func(ctx context.Context, c redis.UniversalClient) (int64, error) {
		return once(ctx, c, mreleaseArgs(keys, owner)...).Int64()
	})
}

// Keys are the set's keys, in the order given to ObtainAll.
func (m *MultiLock) Keys() []string { return append([]string(nil), m.keys...) }

// Owner is the owner the set was granted to.
func (m *MultiLock) Owner() string { return m.owner }

// Tokens are the fencing tokens of the keys, in the order given to ObtainAll.
func (m *MultiLock) Tokens() []int64 {
	tokens := make([]int64, len(m.members))
	for i, member := range m.members {
		tokens[i] = member.token
	}
	return tokens
}

// Token is the fencing token of key, 0 when key is not in the set.
func (m *MultiLock) Token(key string) int64 {
	if member := m.byKey[key]; member != nil {
		return member.token
	}
	return 0
}

// Lost is closed when the set is lost: once, when any member is (its renewal found the lease
// gone, the lease ended without a renewal getting through, a fixed lease reached its end), or
// when Release found a member's lease gone. Err then says why, naming the key; the members
// still held are released (best effort), so a set is never left half held.
func (m *MultiLock) Lost() <-chan struct{} { return m.lost }

// Err is nil while the set lives and after a release that found every member live; once the
// set is lost it is an error that matches ErrLost, names the key and says why.
func (m *MultiLock) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// memberLost is a member's loss (called once per member, under its mu): the set is lost, and
// the members still held leave the loop and are released, in the background.
func (m *MultiLock) memberLost(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.phase != held {
		return
	}
	m.phase, m.err = lost, err
	close(m.lost)
	go m.releaseRest()
}

// releaseRest releases the members still held with one LOCK.MRELEASE, best effort (their
// leases end by themselves otherwise).
func (m *MultiLock) releaseRest() {
	var keys []string
	for _, member := range m.members {
		if member.leave() {
			keys = append(keys, member.key)
		}
	}
	if len(keys) > 0 {
		_, _ = m.locker.mrelease(context.Background(), keys, m.owner)
	}
}

// known is nil while the set is live, else why not.
func (m *MultiLock) known() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.phase {
	case lost:
		return m.err
	case released:
		return fmt.Errorf("%s: the set was released", strings.Join(m.keys, ", "))
	}
	return nil
}

// Guard runs one command under key's lock, a member of the set, as Lock.Guard does: sent with
// key's token (LOCK.GUARD key token command args...), refused (ErrStale) once that token is
// stale, and at once, without the server, when the set is known lost or released. A key not
// in the set is ErrInvalidArgument.
func (m *MultiLock) Guard(ctx context.Context, key string, args ...any) *redis.Cmd {
	member := m.byKey[key]
	if member == nil {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(invalid("Guard: %q is not a key of the set", key))
		return cmd
	}
	if err := m.known(); err != nil {
		cmd := redis.NewCmd(ctx, guardArgs(key, member.token, args)...)
		cmd.SetErr(fmt.Errorf("%w: %w", ErrStale, err))
		return cmd
	}
	return member.Guard(ctx, args...)
}

// Release ends every member's hold in one command (LOCK.MRELEASE) and reports whether every
// one was still live. The members leave the renewal loop first. A set known lost or already
// released answers false at once, without the server. A release that finds a member's lease
// gone answers false and marks the set lost (Lost is closed, Err matches ErrLost). When the
// server does not answer, the error matches ErrUnavailable (and the set is no longer renewed).
func (m *MultiLock) Release(ctx context.Context) (bool, error) {
	m.mu.Lock()
	was := m.phase
	if was == held {
		m.phase = released
	}
	m.mu.Unlock()
	if was != held {
		return false, nil
	}
	for _, member := range m.members {
		member.leave()
	}
	n, err := m.locker.mrelease(ctx, m.keys, m.owner)
	switch {
	case err != nil:
		return false, err
	case n < int64(len(m.keys)):
		m.mu.Lock()
		if m.phase == released {
			m.phase = lost
			m.err = fmt.Errorf("%w: %s: %s", ErrLost, strings.Join(m.keys, ", "), reasonGoneAtRelease)
			close(m.lost)
		}
		m.mu.Unlock()
		return false, nil
	}
	return true, nil
}

// Extend renews every member now (LOCK.EXTEND key owner ttl TOKEN token, in one pipeline), as
// Lock.Extend does one: each lease ends ttl from now, and the watchdog, if on, renews by ttl
// from then on. It answers true only if every member was live; a member the server answers 0
// for is lost, and with it the set ("the lease ran out before it was renewed", naming the key).
// A set known lost or released answers false at once, without the server. A ttl under 1ms is
// ErrInvalidArgument; when the server does not answer, the error matches ErrUnavailable, and
// each member's lease is counted as ending no later than ttl from when the extend was sent (it
// may have run), as Lock.Extend does. As Lock.Extend, the set's extends go one at a time, in
// the order they were called, and each is sent after the members' renewals already on their
// way are answered.
func (m *MultiLock) Extend(ctx context.Context, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, invalid("ttl %v: must be at least 1ms", ttl)
	}
	if m.known() != nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.locker.bound) // the waits and the extend: one bound
	defer cancel()
	giveBack, err := m.locker.awaitTurn(ctx, m.keys[0], m.extends)
	if err != nil {
		return false, err
	}
	defer giveBack()
	if m.known() != nil { // lost or released while it waited
		return false, nil
	}
	flights := make([]<-chan struct{}, len(m.members))
	for i, member := range m.members {
		flights[i] = member.extending(ttl)
	}
	if err := m.locker.landFirst(ctx, m.keys[0], flights...); err != nil {
		return false, err
	}
	sent := time.Now()
	answers, err := pooled(ctx, m.locker, m.keys[0], func(ctx context.Context, c redis.UniversalClient) ([]int64, error) {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(m.members))
		for i, member := range m.members {
			cmds[i] = pipe.Do(ctx, extendArgs(member.key, m.owner, ttl, member.token)...)
		}
		_, _ = pipe.Exec(ctx)
		answers := make([]int64, len(cmds))
		for i, cmd := range cmds {
			n, err := cmd.Int64()
			if err != nil {
				return nil, err
			}
			answers[i] = n
		}
		return answers, nil
	})
	if err != nil {
		for _, member := range m.members {
			member.extendFailed(err, sent, ttl)
		}
		return false, err
	}
	all := true
	for i, member := range m.members {
		if !member.extended(answers[i], sent, ttl) {
			all = false
		}
	}
	return all && m.known() == nil, nil
}
