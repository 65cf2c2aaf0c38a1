package leasehold_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// startWatching starts an elector whose OnNewLeader records "holder token".
func startWatching(t *testing.T, c *leasehold.Client, job, name string, ttl time.Duration) *running {
	t.Helper()
	rec := &recorder{}
	cb := rec.callbacks()
	cb.OnNewLeader = func(holder string, token uint64, _ []byte) { rec.add(fmt.Sprintf("leader %s %d", holder, token)) }
	e, err := leasehold.NewElector(c, leasehold.ElectorConfig{Job: job, Name: name, TTL: ttl, Callbacks: cb, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Elector: e, cancel: cancel, done: make(chan struct{}), rec: rec}
	go func() { _ = e.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

// leaders is the OnNewLeader part of what r recorded.
func (r *running) leaders() []string {
	var out []string
	for _, ev := range r.rec.get() {
		if len(ev) > 7 && ev[:7] == "leader " {
			out = append(out, ev)
		}
	}
	return out
}

func TestOnNewLeaderReportsTheLeaderThenOurTakeOver(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	job := uniqueJob("newleader")
	// With a 10 s TTL the follower's waiting Acquire waits 30 s: only its
	// watch can tell it of the leader that soon.
	ttl := 10 * time.Second
	a := startWatching(t, c, job, "a", ttl)
	waitUntil(t, patience, "a leads", a.IsLeader)
	waitUntil(t, patience, "a told of its own lead", func() bool { return len(a.leaders()) >= 1 })
	b := startWatching(t, c, job, "a", ttl) // same name: another holder
	first := []string{fmt.Sprintf("leader %s 1", a.Holder())}
	waitUntil(t, patience, "the follower told of the leader", func() bool { return len(b.leaders()) >= 1 })
	if got := b.leaders(); !slices.Equal(got, first) {
		t.Fatalf("follower: %v", got)
	}
	if got := a.leaders(); !slices.Equal(got, first) {
		t.Fatalf("leader: %v (reported twice?)", got)
	}
	s.waitWaiters(t, 1)
	a.stop() // resigns: releases
	waitUntil(t, patience, "the follower told of its own lead", func() bool { return len(b.leaders()) >= 2 })
	want := append(first, fmt.Sprintf("leader %s 2", b.Holder()))
	if got := b.leaders(); !slices.Equal(got, want) {
		t.Fatalf("follower: %v, want %v", got, want)
	}
	// The watch may tell of our grant before the Acquire's answer comes.
	waitUntil(t, patience, "the follower leads", b.IsLeader)
	if got := a.leaders(); len(got) < 1 || !slices.Equal(got[:1], first) || len(got) > 2 {
		t.Fatalf("old leader: %v", got)
	}
	b.stop()
	// Nothing is reported after Run returned: not even a new leader that
	// a watch of the job has been told of since.
	n := len(b.rec.get())
	if a, err := c.Acquire(ctxT(t), job, "late", ttl, 0); err != nil || !a.Acquired || a.Lease.Token != 3 {
		t.Fatalf("late: %+v %v", a, err)
	}
	w, err := c.Watch(ctxT(t), job)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if ev, err := w.Recv(); err != nil || ev.Lease.Holder != "late" {
		t.Fatalf("watch: %+v %v", ev, err)
	}
	if len(b.rec.get()) != n {
		t.Fatalf("called after Run returned: %v", b.rec.get())
	}
}

func TestOnNewLeaderReportsOtherHolders(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("others")
	if a, err := c.Acquire(ctx, job, "outsider", 30*time.Second, 0); err != nil || !a.Acquired {
		t.Fatalf("outsider: %+v %v", a, err)
	}
	// A holder that is no elector waits first, so it is granted next.
	thief := make(chan leasehold.Acquired, 1)
	go func() {
		a, _ := c.Acquire(ctx, job, "thief", 30*time.Second, 20*time.Second)
		thief <- a
	}()
	s.waitWaiters(t, 1)
	e := startWatching(t, c, job, "e", 10*time.Second)
	s.waitWaiters(t, 2)
	waitUntil(t, patience, "the current leader", func() bool { return len(e.leaders()) >= 1 })
	if err := c.Release(ctx, job, "outsider", 1); err != nil {
		t.Fatal(err)
	}
	if a := <-thief; !a.Acquired || a.Lease.Token != 2 {
		t.Fatalf("thief: %+v", a)
	}
	waitUntil(t, patience, "the thief's lead", func() bool { return len(e.leaders()) >= 2 })
	if err := c.Release(ctx, job, "thief", 2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, patience, "our lead", func() bool { return len(e.leaders()) >= 3 })
	want := []string{"leader outsider 1", "leader thief 2", fmt.Sprintf("leader %s 3", e.Holder())}
	if got := e.leaders(); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	waitUntil(t, patience, "our OnStartedLeading", func() bool { return e.rec.has("elected 3") })
}

func TestRunWithoutOnNewLeaderOpensNoWatch(t *testing.T) {
	s := startServer(t, "--max-watchers", "1")
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("nowatch")
	e := start(t, c, job, "e", 10*time.Second)
	waitUntil(t, patience, "election", e.IsLeader)
	// The one watcher the server allows is still free.
	w, err := c.Watch(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if ev, err := w.Recv(); err != nil || ev.Lease.Holder != e.Holder() {
		t.Fatalf("watch: %+v %v", ev, err)
	}
}

func TestOnNewLeaderReportsOurLeadWithoutAWatch(t *testing.T) {
	s := startServer(t, "--max-watchers", "1")
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("nowatcher")
	// Take the one watcher the server allows: the elector's watch is
	// refused (QUOTA_EXCEEDED) and retried, while the campaign still
	// reports our own lead.
	w, err := c.Watch(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	e := startWatching(t, c, job, "e", 10*time.Second)
	waitUntil(t, patience, "election", e.IsLeader)
	waitUntil(t, patience, "the report", func() bool { return len(e.leaders()) == 1 })
	if got, want := e.leaders()[0], fmt.Sprintf("leader %s 1", e.Holder()); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Every grant of the job is reported once, in token order, with its
// holder: grants to another holder and to the elector itself, four grants
// to two holders, the elector losing its lease (the chaos API expires it)
// in between.
func TestOnNewLeaderReportsEveryGrantInTokenOrder(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("every-grant")
	if a, err := c.Acquire(ctx, job, "x", 60*time.Second, 0); err != nil || !a.Acquired {
		t.Fatalf("x: %+v %v", a, err)
	}
	e := startWatching(t, c, job, "e", 10*time.Second)
	s.waitWaiters(t, 1)
	if err := c.Release(ctx, job, "x", 1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, patience, "e leads", func() bool { tok, ok := e.Token(); return ok && tok == 2 })
	x := waitAcquire(c, job, "x", 60*time.Second)
	s.waitWaiters(t, 1)
	if _, err := c.Chaos().Expire(ctx, job); err != nil { // x, the first waiter, is granted 3
		t.Fatal(err)
	}
	if a := <-x; !a.Acquired || a.Lease.Token != 3 {
		t.Fatalf("x: %+v", a)
	}
	waitUntil(t, patience, "e's loss", func() bool { return e.rec.has("lost 2") })
	s.waitWaiters(t, 1) // e campaigns again
	if err := c.Release(ctx, job, "x", 3); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, patience, "e leads again", func() bool { return len(e.leaders()) >= 4 })
	want := []string{"leader x 1", fmt.Sprintf("leader %s 2", e.Holder()), "leader x 3", fmt.Sprintf("leader %s 4", e.Holder())}
	if got := e.leaders(); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
