package main

// The worker's shard member: shards, shards-write, shards-stop.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// shardMember is the worker's member of a shard group (ShardMember.Run),
// until shards-stop or the worker's shutdown.
type shardMember struct {
	background
	group  string
	mu     sync.Mutex
	tokens map[uint32]uint64 // the token each shard was last owned with, kept after it moved
}

func (s *shardMember) stop() {
	if s != nil {
		s.background.stop()
	}
}

// running: the member has not ended (a refused join or a membership
// ended by an error let another start).
func (s *shardMember) running() bool {
	if s == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// lastToken is the token shard k was last owned with; 0 if never.
func (s *shardMember) lastToken(k uint32) uint64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens[k]
}

// startShards joins the group of arg ("<group> <n>") as name, with the
// worker's TTL and a revoke timeout of the TTL, and runs a work per shard
// that waits until cancelled: it prints each assignment, each revoke once
// the shard's work was cancelled (Run then acknowledges it), and each loss.
func startShards(ctx context.Context, c *leasehold.Client, arg, name string, ttl time.Duration) *shardMember {
	group, count, _ := strings.Cut(arg, " ")
	n, err := strconv.ParseUint(count, 10, 32)
	if err != nil {
		n = 0 // refused as the server would: shards must be 1 to 1024
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &shardMember{group: group, tokens: map[uint32]uint64{}}
	s.cancel = cancel
	s.done = bg.start(func() {
		m, err := c.JoinShards(ctx, group, name, uint32(n), leasehold.ShardConfig{TTL: ttl, RevokeTimeout: ttl})
		var ia *leasehold.InvalidArgumentError
		switch {
		case errors.As(err, &ia):
			say("shards invalid field=%s", ia.Field)
			return
		case err != nil:
			say("shards error %v", err)
			return
		}
		say("shards member %s", m.Member())
		err = m.Run(ctx, func(wctx context.Context, sh leasehold.Shard) {
			s.mu.Lock()
			s.tokens[sh.Shard] = sh.Token
			s.mu.Unlock()
			say("shards assigned %d token=%d", sh.Shard, sh.Token)
			<-wctx.Done()
			switch cause := context.Cause(wctx); {
			case errors.Is(cause, leasehold.ErrShardRevoked):
				say("shards revoked %d", sh.Shard)
			case errors.Is(cause, leasehold.ErrShardLost):
				say("shards lost %d token=%d", sh.Shard, sh.Token)
			}
		})
		if err != nil {
			say("shards error %v", err)
		}
	})
	return s
}

// shardsWrite writes value under "status" of shard k's job with the token
// it was last owned with by this worker, even after it moved.
func shardsWrite(c *leasehold.Client, s *shardMember, arg string) string {
	k, value, _ := strings.Cut(arg, " ")
	shard, err := strconv.ParseUint(k, 10, 32)
	if err != nil {
		return "write error bad shard " + k
	}
	token := s.lastToken(uint32(shard))
	if token == 0 {
		return "write error never-owned"
	}
	return write(c, fmt.Sprintf("%s/%d", s.group, shard), token, value)
}
