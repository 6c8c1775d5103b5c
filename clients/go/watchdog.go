package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// watch is the watchdog: every ttl/3 it renews the lease (LOCK.EXTEND key owner ttl TOKEN
// token) on a connection of its own, so a busy pool cannot starve it and a renewal can never
// extend a newer hold. The hold is lost when a renewal answers 0, when no renewal gets through
// before the lease would end (a broken link is reconnected until then; through Sentinel, to
// the current master), or at once on any other failure. It ends with the release (l.stop) or
// the loss.
func (l *Lock) watch(ttl time.Duration, granted time.Time) {
	defer close(l.done)
	interval := max(ttl/3, time.Millisecond)
	leaseEnd := granted.Add(ttl)
	var conn *redis.Client
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-timer.C:
		}
		if !l.renew(&conn, ttl, interval, &leaseEnd) {
			return
		}
		timer.Reset(interval)
	}
}

// renew sends one renewal, in its turn (a release waits for it to end); false when the
// watchdog is to end.
func (l *Lock) renew(conn **redis.Client, ttl, interval time.Duration, leaseEnd *time.Time) (goOn bool) {
	l.turn.Lock()
	defer l.turn.Unlock()
	defer func() {
		if r := recover(); r != nil {
			l.lose(fmt.Sprintf("the watchdog failed: %v", r))
			goOn = false
		}
	}()
	if !l.live() {
		return false
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), interval)
	defer cancel()
	var err error
	if *conn == nil {
		*conn, err = l.locker.dedicated(ctx, l.key, interval)
	}
	var n int64
	if err == nil {
		n, err = (*conn).Do(ctx, "LOCK.EXTEND", l.key, l.owner, millis(ttl), "TOKEN", l.token).Int64()
	}
	switch {
	case err == nil && n == 1:
		*leaseEnd = sent.Add(ttl)
	case err == nil:
		l.lose("the lease ran out before it was renewed")
	case retryable(err):
		if *conn != nil {
			_ = (*conn).Close()
			*conn = nil
		}
		l.locker.reconnect(ctx, err)
		if !time.Now().Before(*leaseEnd) {
			l.lose("the server could not be reached before the lease ended: " + err.Error())
		}
	default:
		l.lose("renewal refused: " + err.Error())
	}
	return l.live()
}
