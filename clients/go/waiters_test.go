package leasehold_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// Two waiters behind a leader are listed in line order: the preferred one
// first though it came second, then the plain one; Waiting counts both,
// also when the limit lists fewer. A grant takes the first off the line.
// A job nobody waits for, or that does not exist, has an empty line.
func TestListWaitersListsTheLineInOrder(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("waiters")
	ttl := 30 * time.Second
	if a, err := c.Acquire(ctx, job, "leader", ttl, 0); err != nil || !a.Acquired {
		t.Fatalf("leader: %+v %v", a, err)
	}
	if line, err := c.ListWaiters(ctx, job, 0); err != nil || line.Waiting != 0 || len(line.Waiters) != 0 {
		t.Fatalf("nobody waits yet: %+v %v", line, err)
	}
	plain := waitAcquire(c, job, "plain", ttl)
	s.waitWaiters(t, 1)
	preferred := waitAcquire(c, job, "preferred", ttl, leasehold.Preferred(true))
	s.waitWaiters(t, 2)

	line, err := c.ListWaiters(ctx, job, 0)
	want := []leasehold.Waiter{{Holder: "preferred", Preferred: true}, {Holder: "plain"}}
	if err != nil || line.Waiting != 2 || !slices.Equal(line.Waiters, want) {
		t.Fatalf("the line: %+v %v, want %+v", line, err, want)
	}
	if line, err := c.ListWaiters(ctx, job, 1); err != nil || line.Waiting != 2 || !slices.Equal(line.Waiters, want[:1]) {
		t.Fatalf("limit 1: %+v %v", line, err)
	}

	// The release hands over to the first listed.
	if err := c.Release(ctx, job, "leader", 1); err != nil {
		t.Fatal(err)
	}
	if g := <-preferred; !g.Acquired || g.Lease.Token != 2 {
		t.Fatalf("preferred: %+v", g)
	}
	if line, err := c.ListWaiters(ctx, job, 0); err != nil || line.Waiting != 1 || !slices.Equal(line.Waiters, want[1:]) {
		t.Fatalf("after the grant: %+v %v", line, err)
	}
	if err := c.Release(ctx, job, "preferred", 2); err != nil {
		t.Fatal(err)
	}
	if g := <-plain; !g.Acquired || g.Lease.Token != 3 {
		t.Fatalf("plain: %+v", g)
	}
	if line, err := c.ListWaiters(ctx, job, 0); err != nil || line.Waiting != 0 || len(line.Waiters) != 0 {
		t.Fatalf("nobody waits any more: %+v %v", line, err)
	}

	if line, err := c.ListWaiters(ctx, uniqueJob("never-seen"), 0); err != nil || line.Waiting != 0 || len(line.Waiters) != 0 {
		t.Fatalf("an unknown job: %+v %v", line, err)
	}
	if _, err := c.ListWaiters(ctx, "", 0); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Fatalf("an empty job: %v", err)
	}
}

// Electors waiting are listed by their holders, the preferred one first.
func TestListWaitersNamesWaitingElectors(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("waiters-electors")
	ttl := 10 * time.Second
	leader := startWith(t, c, leasehold.ElectorConfig{Job: job, Name: "l", TTL: ttl})
	waitUntil(t, patience, "the leader leads", leader.IsLeader)
	plain := startWith(t, c, leasehold.ElectorConfig{Job: job, Name: "w", TTL: ttl})
	s.waitWaiters(t, 1)
	pref := startWith(t, c, leasehold.ElectorConfig{Job: job, Name: "p", TTL: ttl, Preferred: true})
	s.waitWaiters(t, 2)
	line, err := c.ListWaiters(ctx, job, 0)
	want := []leasehold.Waiter{{Holder: pref.Holder(), Preferred: true}, {Holder: plain.Holder()}}
	if err != nil || line.Waiting != 2 || !slices.Equal(line.Waiters, want) {
		t.Fatalf("the line: %+v %v, want %+v", line, err, want)
	}
}
