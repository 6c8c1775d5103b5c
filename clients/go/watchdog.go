package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// watch is the watchdog: every ttl/3 it renews the lease (LOCK.EXTEND key owner ttl TOKEN
// token) on a connection of its own, so a busy pool cannot starve it and a renewal can never
// extend a newer hold. It keeps the lease's end as the client knows it (the grant's start, or
// the sending of the last renewal that succeeded, plus ttl: never later than the server's),
// and the hold is lost at that moment by a timer when no renewal has got through (rule 15),
// at once when a renewal answers 0 or fails otherwise. A broken link is reconnected until
// then (through Sentinel, to the current master). It ends with the release (l.stop) or the
// loss.
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
	renewal := time.NewTimer(interval)
	defer renewal.Stop()
	end := time.NewTimer(time.Until(leaseEnd))
	defer end.Stop()
	var failure error // why the last renewal did not get through
	for {
		select {
		case <-l.stop:
			return
		case <-end.C:
			l.lose(fmt.Sprintf("the server could not be reached before the lease ended: %v", failure), held)
			return
		case <-renewal.C:
		}
		var goOn bool
		if goOn, failure = l.renew(&conn, ttl, interval, &leaseEnd, failure); !goOn {
			return
		}
		end.Reset(time.Until(leaseEnd))
		renewal.Reset(interval)
	}
}

// renew sends one renewal, in its turn (a release abandons it and waits for its end), its
// reply awaited no longer than the lease lasts; false when the watchdog is to end, and why the
// renewal did not get through (failure, unchanged, when it did).
func (l *Lock) renew(conn **redis.Client, ttl, interval time.Duration, leaseEnd *time.Time, failure error) (goOn bool, why error) {
	l.turn.Lock()
	defer l.turn.Unlock()
	defer func() {
		if r := recover(); r != nil {
			l.lose(fmt.Sprintf("the watchdog failed: %v", r), held)
			goOn = false
		}
	}()
	sent := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), *leaseEnd)
	defer cancel()
	if !l.inFlight(cancel) {
		return false, failure
	}
	var err error
	if *conn == nil {
		*conn, _, err = l.locker.dedicated(ctx, l.key, interval)
	}
	var n int64
	if err == nil {
		c := *conn
		abandoned := context.AfterFunc(ctx, func() { _ = c.Close() }) // go-redis reads on past a cancel
		n, err = c.Do(ctx, "LOCK.EXTEND", l.key, l.owner, millis(ttl), "TOKEN", l.token).Int64()
		abandoned()
	}
	switch {
	case err == nil && n == 1:
		*leaseEnd = sent.Add(ttl)
		return true, nil
	case err == nil:
		l.lose("the lease ran out before it was renewed", held)
	case retryable(err) || ctx.Err() != nil:
		if *conn != nil {
			_ = (*conn).Close()
			*conn = nil
		}
		l.locker.reconnect(ctx, err)
		return l.live(), err // lost at the lease's end unless a renewal gets through first
	default:
		l.lose("renewal refused: "+err.Error(), held)
	}
	return false, err
}

// inFlight makes cancel the way a release abandons the renewal about to be sent; false when
// the hold is no longer held (then nothing is sent).
func (l *Lock) inFlight(cancel context.CancelFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.phase != held {
		return false
	}
	l.abandon = cancel
	return true
}
