package redislock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// protocol.go: the wire protocol, written once (docs/clients.md): the commands this package
// sends, how their replies read, the reasons a hold is lost (rule 8, word for word) and the
// error replies that are asked again elsewhere (rule 19).

// acquireArgs is LOCK.ACQUIRE for o; wait < 0 sends no WAIT (one try), 0 waits without limit.
func (o *options) acquireArgs(key, owner string, ttl time.Duration, wait int64) []any {
	args := []any{"LOCK.ACQUIRE", key, owner, millis(ttl)}
	if o.shared {
		args = append(args, "SHARED")
	}
	if o.limit != 0 {
		args = append(args, "LIMIT", o.limit, "PERMITS", o.permits)
	}
	if o.session {
		args = append(args, "SESSION")
	}
	if wait >= 0 {
		args = append(args, "WAIT", wait)
	}
	return args
}

// macquireArgs is LOCK.MACQUIRE of a set for o (every key exclusive, or every key shared);
// wait < 0 sends no WAIT (one try), 0 waits without limit.
func (o *options) macquireArgs(keys []string, owner string, ttl time.Duration, wait int64) []any {
	args := make([]any, 0, len(keys)+7)
	args = append(args, "LOCK.MACQUIRE", len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, owner, millis(ttl))
	if o.shared {
		args = append(args, "SHARED")
	}
	if wait >= 0 {
		args = append(args, "WAIT", wait)
	}
	return args
}

// mreleaseArgs is LOCK.MRELEASE: how many of keys owner held and released.
func mreleaseArgs(keys []string, owner string) []any {
	args := make([]any, 0, len(keys)+3)
	args = append(args, "LOCK.MRELEASE", len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	return append(args, owner)
}

// maxSetSize is the most keys a set takes (the server's default lock.max-set-size).
const maxSetSize = 64

// parseTokens reads LOCK.MACQUIRE's reply for n keys: their tokens in the keys' order, or
// nil when not granted.
func parseTokens(cmd *redis.Cmd, n int) ([]int64, error) {
	v, err := cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, ErrNotObtained
	case isAny(err, codeDeadlock):
		return nil, &serverError{ErrDeadlock, err}
	case isAny(err, codeCrossSlot):
		return nil, &serverError{ErrCrossSlot, err}
	case err != nil:
		return nil, err
	}
	list, _ := v.([]any)
	tokens := make([]int64, 0, n)
	for _, x := range list {
		if token, ok := x.(int64); ok {
			tokens = append(tokens, token)
		}
	}
	if len(list) != n || len(tokens) != n {
		return nil, fmt.Errorf("redislock: LOCK.MACQUIRE answered %v (%T), not %d tokens", v, v, n)
	}
	return tokens, nil
}

// releaseArgs is LOCK.RELEASE of one hold: 1 when it was live, 0 when it was gone.
func releaseArgs(key, owner string, token int64) []any {
	return []any{"LOCK.RELEASE", key, owner, "TOKEN", token}
}

// extendArgs is LOCK.EXTEND of one hold (a renewal, or Extend): its lease ends ttl from now;
// 1 when it was live, 0 when it was gone. The token keeps it from extending a newer hold.
func extendArgs(key, owner string, ttl time.Duration, token int64) []any {
	return []any{"LOCK.EXTEND", key, owner, millis(ttl), "TOKEN", token}
}

// guardArgs is LOCK.GUARD: command runs only while token is the live exclusive hold's.
func guardArgs(key string, token int64, command []any) []any {
	return append([]any{"LOCK.GUARD", key, token}, command...)
}

// replicasArgs is WAIT: how many replicas have the writes so far, within timeout.
func replicasArgs(n int, timeout time.Duration) []any {
	return []any{"WAIT", n, timeout.Milliseconds()}
}

// watchArgs is LOCK.WATCH: who holds key, at once without a cursor (""), else once the holders
// differ from those cursor names, waiting up to wait ms for it (WAIT; 0: without limit; a
// negative wait sends none: nil at once when nothing is new).
func watchArgs(key, cursor string, wait int64) []any {
	args := []any{"LOCK.WATCH", key}
	if cursor != "" {
		args = append(args, "AFTER", cursor)
	}
	if wait >= 0 {
		args = append(args, "WAIT", wait)
	}
	return args
}

// A watchReply is LOCK.WATCH's answer: the cursor to pass as AFTER next, and the newest live
// hold (its owner and token; none when the lock is free, or a plain string's).
type watchReply struct {
	cursor string
	owner  string
	token  int64
}

// parseWatch reads LOCK.WATCH's reply (a RESP3 map, or a RESP2 flat array of fields and
// values); redis.Nil when nothing is new.
func parseWatch(cmd *redis.Cmd) (watchReply, error) {
	v, err := cmd.Result()
	if err != nil {
		return watchReply{}, err
	}
	fields := replyMap(v)
	cursor, ok := fields["cursor"].(string)
	if !ok {
		return watchReply{}, fmt.Errorf("redislock: LOCK.WATCH answered %v (%T), not a map with a cursor", v, v)
	}
	reply := watchReply{cursor: cursor}
	reply.token, _ = fields["token"].(int64)
	if reply.token == 0 {
		return reply, nil
	}
	holders, _ := fields["holders"].([]any)
	for _, h := range holders {
		hold := replyMap(h)
		if token, _ := hold["token"].(int64); token == reply.token {
			reply.owner, _ = hold["owner"].(string)
		}
	}
	return reply, nil
}

// replyMap is a map reply as a Go map: a RESP3 map, or a RESP2 array of fields and values.
func replyMap(v any) map[string]any {
	out := map[string]any{}
	switch v := v.(type) {
	case map[any]any:
		for k, x := range v {
			if name, ok := k.(string); ok {
				out[name] = x
			}
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			if name, ok := v[i].(string); ok {
				out[name] = v[i+1]
			}
		}
	}
	return out
}

// millis is d in whole milliseconds, rounded up (a lease is never shorter than asked), at
// least 1.
func millis(d time.Duration) int64 {
	return max((d + time.Millisecond - 1).Milliseconds(), 1)
}

// parseToken reads LOCK.ACQUIRE's reply: the fencing token, or nil when not granted.
func parseToken(cmd *redis.Cmd) (int64, error) {
	v, err := cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, ErrNotObtained
	case isAny(err, codeDeadlock):
		return 0, &serverError{ErrDeadlock, err}
	case err != nil:
		return 0, err
	}
	token, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redislock: LOCK.ACQUIRE answered %v (%T), not a token", v, v)
	}
	return token, nil
}

// The reasons a hold is lost (rule 8), each word for word in every client.
const (
	reasonRanOut        = "the lease ran out before it was renewed"
	reasonUnreachable   = "the server could not be reached before the lease ended: " // + cause
	reasonRefused       = "renewal refused: "                                        // + the error reply
	reasonFailed        = "the watchdog failed: "                                    // + cause
	reasonGoneAtRelease = "the hold was gone when released (its lease ran out)"
	reasonFixedEnded    = "the lease ended (a fixed lease, not extended in time)"
	reasonSessionClosed = "the session's connection closed: " // + cause
)

// Error replies with a meaning of their own.
const (
	codeStale         = "STALE"               // a guarded write refused: the token is not the live one
	codeDeadlock      = "DEADLOCK"            // an upgrade beside other readers; a set waiting behind its own holds
	codeCrossSlot     = "CROSSSLOT"           // a set's keys in more than one slot of a cluster
	codeUnknownModule = "ERR unknown command" // the server lacks the module
)

// retryableCodes (rule 19): this server did not run the command and cannot serve the key
// now; asked again (after a redirect, or a new connection) with the same owner.
var retryableCodes = []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "LOADING",
	"MASTERDOWN", "UNBLOCKED"}

// isRetryableReply reports whether err is an error reply of retryableCodes.
func isRetryableReply(err error) bool { return isAny(err, retryableCodes...) }

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
