package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// Shard groups: Client.JoinShards, ShardMember (Events, Release, Leave,
// Run) and Client.GetGroup, against a real server. Shard k of group G is
// the job "G/k", with its own token.

// shardTTL: renewals every second, far inside the TTL however loaded the
// machine.
const shardTTL = 3 * time.Second

// shardRun is a member whose Run runs a work per shard that records what
// it owns, and, once cancelled, why, after a cleanup of its own.
type shardRun struct {
	*leasehold.ShardMember
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed

	mu    sync.Mutex
	owned map[uint32]uint64 // the shards whose work runs, and their tokens
	// ended: "shard token" -> the cause of its work's context, set once the
	// work has returned (after its cleanup).
	ended map[string]error
	log   []string
}

// runShards joins group (4 shards) as name and runs its work: each shard's
// work calls started (if not nil) first, then waits until cancelled,
// takes cleanup (a work that takes time to stop: its acknowledgement must
// wait for it), and records why it ended.
func runShards(t *testing.T, c *leasehold.Client, group, name string, cfg leasehold.ShardConfig,
	cleanup time.Duration, started func(leasehold.Shard)) *shardRun {
	t.Helper()
	m, err := c.JoinShards(context.Background(), group, name, 4, cfg)
	if err != nil {
		t.Fatalf("%s joins %s: %v", name, group, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &shardRun{ShardMember: m, cancel: cancel, done: make(chan struct{}),
		owned: map[uint32]uint64{}, ended: map[string]error{}}
	go func() {
		defer close(r.done)
		r.err = m.Run(ctx, func(ctx context.Context, s leasehold.Shard) {
			if s.Job != fmt.Sprintf("%s/%d", group, s.Shard) {
				panic(fmt.Sprintf("shard %d's job is %q", s.Shard, s.Job))
			}
			if started != nil {
				started(s)
			}
			r.mu.Lock()
			r.owned[s.Shard] = s.Token
			r.log = append(r.log, fmt.Sprintf("assigned %d token=%d", s.Shard, s.Token))
			r.mu.Unlock()
			<-ctx.Done()
			r.mu.Lock()
			delete(r.owned, s.Shard)
			r.mu.Unlock()
			time.Sleep(cleanup) // the work stopping: it flushes, say
			r.mu.Lock()
			r.ended[fmt.Sprintf("%d %d", s.Shard, s.Token)] = context.Cause(ctx)
			r.mu.Unlock()
		})
	}()
	t.Cleanup(r.stop)
	return r
}

// stop ends Run (it leaves) and waits for it.
func (r *shardRun) stop() {
	r.cancel()
	<-r.done
}

// shards is what r's works own now: shard -> token.
func (r *shardRun) shards() map[uint32]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.owned)
}

// endedWith is why the work of shard with token ended, and whether it has.
func (r *shardRun) endedWith(shard uint32, token uint64) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.ended[fmt.Sprintf("%d %d", shard, token)]
	return err, ok
}

// waitOwns waits until r's works own n shards.
func waitOwns(t *testing.T, r *shardRun, n int) map[uint32]uint64 {
	t.Helper()
	var got map[uint32]uint64
	waitUntil(t, patience, fmt.Sprintf("%s owns %d shards", r.Member(), n), func() bool {
		got = r.shards()
		return len(got) == n
	})
	return got
}

// (a) Balance and handover. A joins a group of 4 and is assigned all 4
// (token 1 each); B joins: each ends with 2. The 2 shards that moved have
// token 2 on B, and A's work for each had ended (cancelled as revoked,
// its cleanup done) before B's work for it started: Run acknowledges a
// revoke only once the work has returned. A's write on a moved shard's
// job with its old token is the typed Fenced error; B's with its token
// passes. GetGroup shows 2 members with 2 shards each.
func TestShardsBalanceAndHandOverCancelTheOldOwnersWorkFirst(t *testing.T) {
	s := startServer(t)
	c, ctx, group := dial(t, s), ctxT(t), uniqueJob("g")
	cfg := leasehold.ShardConfig{TTL: shardTTL}
	a := runShards(t, c, group, "a", cfg, 500*time.Millisecond, nil)
	if first := waitOwns(t, a, 4); !maps.Equal(first, map[uint32]uint64{0: 1, 1: 1, 2: 1, 3: 1}) {
		t.Fatalf("A owns %v, want shards 0-3 with token 1", first)
	}

	// Whether A's work for the shard had ended when B's started: B's work
	// starts once B is told ASSIGNED.
	var mu sync.Mutex
	aEndedFirst := map[uint32]bool{}
	b := runShards(t, c, group, "b", cfg, 0, func(s leasehold.Shard) {
		_, ended := a.endedWith(s.Shard, s.Token-1)
		mu.Lock()
		aEndedFirst[s.Shard] = ended
		mu.Unlock()
	})
	bOwns := waitOwns(t, b, 2)
	aOwns := waitOwns(t, a, 2)
	for k, token := range bOwns {
		if token != 2 {
			t.Fatalf("B owns shard %d with token %d, want 2; A %q, B %q", k, token, a.log, b.log)
		}
		if _, still := aOwns[k]; still {
			t.Fatalf("shard %d owned by both: A %v, B %v", k, aOwns, bOwns)
		}
		mu.Lock()
		first := aEndedFirst[k]
		mu.Unlock()
		if !first {
			t.Fatalf("B's work for shard %d started before A's had ended: the revoke was acknowledged too soon", k)
		}
		if cause, _ := a.endedWith(k, 1); !errors.Is(cause, leasehold.ErrShardRevoked) {
			t.Fatalf("A's work for shard %d ended with cause %v, want ErrShardRevoked", k, cause)
		}
		job := fmt.Sprintf("%s/%d", group, k)
		_, err := c.CheckedWrite(ctx, job, 1, []byte("status"), []byte("a"))
		var f *leasehold.FencedError
		if !errors.As(err, &f) || f.CurrentToken != 2 {
			t.Fatalf("A's write on moved shard %s with token 1: %v, want Fenced with current 2", job, err)
		}
		if v, err := c.CheckedWrite(ctx, job, 2, []byte("status"), []byte("b")); err != nil || v != 1 {
			t.Fatalf("B's write on %s with token 2: version %d, %v", job, v, err)
		}
	}
	for k, token := range aOwns {
		if token != 1 {
			t.Fatalf("A kept shard %d with token %d, want 1", k, token)
		}
		if _, err := c.CheckedWrite(ctx, fmt.Sprintf("%s/%d", group, k), 1, []byte("status"), []byte("a")); err != nil {
			t.Fatalf("A's write on its shard %d: %v", k, err)
		}
	}

	g, err := c.GetGroup(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if g.Group != group || g.Shards != 4 || len(g.Members) != 2 || len(g.Owners) != 4 {
		t.Fatalf("GetGroup: %+v", g)
	}
	for _, mb := range g.Members {
		want := a.shards()
		if mb.Member == b.Member() {
			want = b.shards()
		} else if mb.Member != a.Member() {
			t.Fatalf("GetGroup names a member %q, neither A (%s) nor B (%s)", mb.Member, a.Member(), b.Member())
		}
		if !slices.Equal(mb.Shards, slices.Sorted(maps.Keys(want))) {
			t.Fatalf("GetGroup: %s owns %v, its works %v", mb.Member, mb.Shards, want)
		}
	}
	for i, o := range g.Owners {
		owner, token := a.Member(), aOwns[o.Shard]
		if t2, ok := bOwns[o.Shard]; ok {
			owner, token = b.Member(), t2
		}
		if o.Shard != uint32(i) || o.Job != fmt.Sprintf("%s/%d", group, i) || o.Member != owner || o.Token != token {
			t.Fatalf("GetGroup owner %d: %+v, want %s with token %d", i, o, owner, token)
		}
	}
	if g, err := c.GetGroup(ctx, uniqueJob("never-joined")); err != nil || g.Shards != 0 || len(g.Members) != 0 {
		t.Fatalf("GetGroup of a group never joined: %+v, %v", g, err)
	}
}

// (b) Leave. A leaves (its Run's ctx done): B is assigned A's shards, each
// with A's token + 1, and owns all 4. A's TTL is long: its shards go at
// its leave, not when its holdings run out.
func TestShardsLeaveHandsTheShardsToTheOthers(t *testing.T) {
	s := startServer(t)
	c, ctx, group := dial(t, s), ctxT(t), uniqueJob("g")
	a := runShards(t, c, group, "a", leasehold.ShardConfig{TTL: 60 * time.Second}, 0, nil)
	waitOwns(t, a, 4)
	b := runShards(t, c, group, "b", leasehold.ShardConfig{TTL: shardTTL}, 0, nil)
	waitOwns(t, b, 2)
	aOwned := waitOwns(t, a, 2)

	left := time.Now()
	a.stop()
	if a.err != nil {
		t.Fatalf("A's Run after its ctx was done: %v", a.err)
	}
	select {
	case _, open := <-a.Events():
		if open {
			t.Fatal("A's Events still delivers after it left")
		}
	default:
		t.Fatal("A's Events is not closed after it left")
	}
	for k, token := range aOwned {
		if cause, ok := a.endedWith(k, token); !ok || !errors.Is(cause, context.Canceled) {
			t.Fatalf("A's work for shard %d: ended %v, cause %v", k, ok, cause)
		}
	}
	all := waitOwns(t, b, 4)
	if d := time.Since(left); d > 30*time.Second {
		t.Fatalf("B had every shard %v after A left: A's TTL ran out, the leave freed nothing", d)
	}
	for k, token := range aOwned {
		if all[k] != token+1 {
			t.Fatalf("B owns A's shard %d with token %d, want %d", k, all[k], token+1)
		}
	}
	g, err := c.GetGroup(ctx, group)
	if err != nil || len(g.Members) != 1 || g.Members[0].Member != b.Member() || len(g.Members[0].Shards) != 4 {
		t.Fatalf("GetGroup after A left: %+v, %v", g, err)
	}
}

// (c) A join naming another count than the group's, or 0 shards (or over
// 1024, or no group), is the typed invalid-argument error naming the
// field; the group is unchanged.
func TestShardsJoinWithAnotherCountIsInvalidArgumentNamingShards(t *testing.T) {
	s := startServer(t)
	c, ctx, group := dial(t, s), ctxT(t), uniqueJob("g")
	a := runShards(t, c, group, "a", leasehold.ShardConfig{TTL: shardTTL}, 0, nil)
	waitOwns(t, a, 4)
	for _, tc := range []struct {
		group  string
		shards uint32
		field  string
	}{{group, 5, "shards"}, {group, 0, "shards"}, {group, 1025, "shards"}, {"", 4, "group"}} {
		m, err := c.JoinShards(ctx, tc.group, "b", tc.shards, leasehold.ShardConfig{TTL: shardTTL})
		var ia *leasehold.InvalidArgumentError
		if !errors.As(err, &ia) || ia.Field != tc.field || !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Fatalf("join %q with %d shards: %v (%T), want InvalidArgument naming %s", tc.group, tc.shards, err, err, tc.field)
		}
		if m != nil {
			t.Fatal("a refused join returned a member")
		}
	}
	g, err := c.GetGroup(ctx, group)
	if err != nil || g.Shards != 4 || len(g.Members) != 1 || g.Members[0].Member != a.Member() {
		t.Fatalf("GetGroup after the refused joins: %+v, %v", g, err)
	}
}

// (d) A member that never acknowledges a revoke (it handles the events
// itself and never calls Release) loses the shard at the revoke's
// deadline: the shard moves anyway, with the next token, and the member
// is told ShardLost for it; its old token is fenced.
func TestShardsAnUnacknowledgedRevokeMovesAtItsDeadlineAndIsLost(t *testing.T) {
	s := startServer(t)
	c, ctx, group := dial(t, s), ctxT(t), uniqueJob("g")
	a, err := c.JoinShards(context.Background(), group, "a", 4,
		leasehold.ShardConfig{TTL: shardTTL, RevokeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Leave)
	var mu sync.Mutex
	var events []leasehold.ShardEvent
	go func() {
		for ev := range a.Events() {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	}()
	seen := func(kind leasehold.ShardEventKind) map[uint32]leasehold.ShardEvent {
		mu.Lock()
		defer mu.Unlock()
		out := map[uint32]leasehold.ShardEvent{}
		for _, ev := range events {
			if ev.Kind == kind {
				out[ev.Shard] = ev
			}
		}
		return out
	}
	waitUntil(t, patience, "A assigned 4", func() bool { return len(seen(leasehold.ShardAssigned)) == 4 })

	b := runShards(t, c, group, "b", leasehold.ShardConfig{TTL: shardTTL}, 0, nil)
	waitUntil(t, patience, "A told 2 revokes", func() bool { return len(seen(leasehold.ShardRevoked)) == 2 })
	revoked := seen(leasehold.ShardRevoked)
	for k, ev := range revoked {
		if ev.Token != 1 || ev.Job != fmt.Sprintf("%s/%d", group, k) || ev.Deadline <= 0 || ev.Deadline > time.Second {
			t.Fatalf("the revoke of shard %d: %+v", k, ev)
		}
	}
	waitUntil(t, patience, "A told its revoked shards are lost", func() bool {
		return slices.Equal(slices.Sorted(maps.Keys(seen(leasehold.ShardLost))), slices.Sorted(maps.Keys(revoked)))
	})
	bOwns := waitOwns(t, b, 2)
	for k := range revoked {
		if bOwns[k] != 2 {
			t.Fatalf("B owns %v; A's revoked shard %d should be B's with token 2", bOwns, k)
		}
		if lost := seen(leasehold.ShardLost)[k]; lost.Token != 1 {
			t.Fatalf("A's loss of shard %d: %+v", k, lost)
		}
		_, err := c.CheckedWrite(ctx, fmt.Sprintf("%s/%d", group, k), 1, []byte("status"), []byte("a"))
		if !errors.Is(err, leasehold.ErrFenced) {
			t.Fatalf("A's write on its lost shard %d: %v, want Fenced", k, err)
		}
	}
	g, err := c.GetGroup(ctx, group)
	if err != nil || len(g.Members) != 2 {
		t.Fatalf("GetGroup: %+v, %v", g, err)
	}
	for _, mb := range g.Members {
		if len(mb.Shards) != 2 {
			t.Fatalf("GetGroup: %+v", g)
		}
	}
}

// A stream broken by a server restart: every owned shard is reported lost
// at once (its work cancelled with ErrShardLost), the member joins again
// under the same identity, and the shards still its own are assigned
// again.
func TestShardsABrokenStreamLosesEveryShardAndJoinsAgain(t *testing.T) {
	s := startServer(t)
	c, group := dial(t, s), uniqueJob("g")
	a := runShards(t, c, group, "a", leasehold.ShardConfig{TTL: 30 * time.Second}, 0, nil)
	before := waitOwns(t, a, 4)
	s.kill()
	waitOwns(t, a, 0)
	for k, token := range before {
		if cause, ok := a.endedWith(k, token); !ok || !errors.Is(cause, leasehold.ErrShardLost) {
			t.Fatalf("shard %d's work after the break: ended %v, cause %v", k, ok, cause)
		}
	}
	s = s.restart(t)
	again := waitOwns(t, a, 4)
	g, err := c.GetGroup(ctxT(t), group)
	if err != nil || len(g.Members) != 1 || g.Members[0].Member != a.Member() {
		t.Fatalf("GetGroup after the restart: %+v, %v", g, err)
	}
	for _, o := range g.Owners {
		if o.Member != a.Member() || o.Token != again[o.Shard] {
			t.Fatalf("GetGroup owner %+v; A's works own %v", o, again)
		}
	}
	a.stop()
	if a.err != nil {
		t.Fatalf("A's Run: %v", a.err)
	}
}

// The conformance worker's shards, shards-write and shards-stop.
func TestConformanceWorkerShards(t *testing.T) {
	exe := buildConformanceWorker(t)
	s := startServer(t)
	group := uniqueJob("worker-shards")
	args := []string{"--server", s.target, "--job", uniqueJob("worker-shards-job"), "--ttl-ms", "3000"}
	w1 := startConformanceWorker(t, exe, append(args, "--name", "w1")...)
	w1.send(t, "shards "+group+" 4", "")
	w1.line(t, "shards member w1@")
	for k := range 4 {
		waitUntil(t, patience, "w1 assigned", func() bool { return w1.printed(fmt.Sprintf("shards assigned %d token=1", k)) })
	}
	w1.send(t, "shards-write 0 a", "shards-write ok version=1")
	w2 := startConformanceWorker(t, exe, append(args, "--name", "w2")...)
	w2.send(t, "shards-write 0 x", "shards-write error never-owned")
	w2.send(t, "shards "+group+" 4", "")
	w2.line(t, "shards member w2@")
	waitUntil(t, patience, "w2 assigned 2", func() bool { return w2.count("shards assigned ") == 2 })
	var moved []int
	for k := range 4 {
		if w2.printed(fmt.Sprintf("shards assigned %d token=2", k)) {
			moved = append(moved, k)
			waitUntil(t, patience, "w1's revoke", func() bool { return w1.printed(fmt.Sprintf("shards revoked %d", k)) })
		}
	}
	if len(moved) != 2 {
		t.Fatalf("w2: %q", w2.output())
	}
	w1.send(t, fmt.Sprintf("shards-write %d b", moved[0]), "shards-write fenced current=2")
	w2.send(t, fmt.Sprintf("shards-write %d c", moved[0]), "")
	w2.line(t, "shards-write ok version=")

	w3 := startConformanceWorker(t, exe, append(args, "--name", "w3")...)
	w3.send(t, "shards "+group+" 5", "shards invalid field=shards")

	w1.send(t, "shards-stop", "shards-stop done")
	waitUntil(t, patience, "w2 assigned 4", func() bool { return w2.count("shards assigned ") == 4 })
	w2.send(t, "quit", "bye")
	w1.send(t, "quit", "bye")
	w3.send(t, "quit", "bye")
	if n := w1.count("shards lost "); n != 0 {
		t.Fatalf("w1 lost shards: %q", w1.output())
	}
}
