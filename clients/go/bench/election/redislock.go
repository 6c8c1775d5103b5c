package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
	"github.com/redis-lock/redis-lock/clients/go/internal/testserver"
)

const redisKey = "bench:leader"

// startRedis starts a redis-server with the module (LOCK_TEST_SERVER, LOCK_MODULE).
func startRedis() (addr string, stop func(), err error) {
	s, err := testserver.Start()
	if err != nil {
		return "", nil, err
	}
	return s.Addr(), s.Stop, nil
}

var redislockSystem = system{
	name: "redislock Election",
	candidate: func(addr, id string, ttl time.Duration) error {
		client := redis.NewClient(&redis.Options{Addr: addr})
		defer func() { _ = client.Close() }()
		locker := redislock.New(client)
		defer func() { _ = locker.Close() }()
		ctx := context.Background()
		e := redislock.NewElection(locker, redisKey, id, redislock.WithLeaderTTL(ttl))
		lead, err := e.Campaign(ctx)
		if err != nil {
			return err
		}
		say("LEADER")
		// The fenced write: LOCK.GUARD runs the SET only while the term is the live holder's.
		if err := lead.Guard(ctx, "SET", "bench:data", id).Err(); err != nil {
			return fmt.Errorf("the fenced write: %w", err)
		}
		say("WROTE")
		if waitForResign(lead.Context().Done()) {
			return lead.Resign(ctx)
		}
		return nil
	},
	observe: func(ctx context.Context, addr string, ttl time.Duration, seen func(string)) error {
		client := redis.NewClient(&redis.Options{Addr: addr})
		defer func() { _ = client.Close() }()
		locker := redislock.New(client)
		defer func() { _ = locker.Close() }()
		for leader := range redislock.NewElection(locker, redisKey, "observer").Observe(ctx) {
			if !leader.None() {
				seen(leader.Identity)
			}
		}
		return ctx.Err()
	},
}
