package leasehold_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// A lease is released once its connection closes, this long after at
// most: far less than the TTL of 30 s the tests grant, so that a release
// is told from an expiry whatever a stall.
const closedWithin = 10 * time.Second

// A grant made with BindToStream on a client of its own is released as
// soon as that client's connection closes: the job is free at once (or
// its waiter granted the next token), and the history says
// CONNECTION_CLOSED. Without the option, closing the client leaves the
// lease to its TTL.
func TestBindToStreamReleasesWhenTheConnectionCloses(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("bound")
	ttl := 30 * time.Second

	bound := dial(t, s) // its own connection
	a, err := bound.Acquire(ctx, job, "bound", ttl, 0, leasehold.BindToStream(true))
	if err != nil || !a.Acquired || a.Lease.Token != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	if l, _ := c.GetLease(ctx, job); l.Holder != "bound" {
		t.Fatalf("server says %+v", l)
	}
	closed := time.Now()
	_ = bound.Close()
	waitUntil(t, patience, "the release", func() bool { l, _ := c.GetLease(ctx, job); return l.Holder == "" })
	if d := time.Since(closed); d > closedWithin {
		t.Fatalf("free %v after the close: expired, not released", d)
	}
	if l, _ := c.GetLease(ctx, job); l.Token != 1 {
		t.Fatalf("after the close: %+v", l)
	}
	if end := tenureEnd(t, s, job, 1); end != pb.Tenure_END_CONNECTION_CLOSED {
		t.Fatalf("tenure 1 ended %v", end)
	}

	// Again, with a waiter: it is granted the next token at once.
	bound = dial(t, s)
	if a, err := bound.Acquire(ctx, job, "bound", ttl, 0, leasehold.BindToStream(true)); err != nil || a.Lease.Token != 2 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	got := waitAcquire(c, job, "next", ttl)
	s.waitWaiters(t, 1)
	closed = time.Now()
	_ = bound.Close()
	if w := <-got; !w.Acquired || w.Lease.Token != 3 || time.Since(closed) > closedWithin {
		t.Fatalf("waiter: %+v after %v", w, time.Since(closed))
	}
	if end := tenureEnd(t, s, job, 2); end != pb.Tenure_END_CONNECTION_CLOSED {
		t.Fatalf("tenure 2 ended %v", end)
	}

	// Not bound (the default, or BindToStream(false)): the lease outlives
	// its client's connection.
	for i, opts := range [][]leasehold.AcquireOption{nil, {leasehold.BindToStream(false)}} {
		free := uniqueJob("unbound")
		unbound := dial(t, s)
		if a, err := unbound.Acquire(ctx, free, "unbound", ttl, 0, opts...); err != nil || !a.Acquired {
			t.Fatalf("%d: acquire: %+v %v", i, a, err)
		}
		_ = unbound.Close()
		time.Sleep(time.Second)
		if l, _ := c.GetLease(ctx, free); l.Holder != "unbound" {
			t.Fatalf("%d: released with its connection: %+v", i, l)
		}
	}
}

// An Elector with BindToStream leads like any other; when its client's
// connection closes (as when its process dies), the elector waiting is
// elected at once, and the old leader's writes are fenced.
func TestElectorWithBindToStream(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("bound-elector")
	ttl := 30 * time.Second
	startBound := func(client *leasehold.Client, name string) *running {
		rec := &recorder{}
		e, err := leasehold.NewElector(client, leasehold.ElectorConfig{Job: job, Name: name, TTL: ttl,
			Callbacks: rec.callbacks(), Logger: quiet, BindToStream: true})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(context.Background())
		r := &running{Elector: e, cancel: cancel, done: make(chan struct{}), rec: rec}
		go func() { _ = e.Run(rctx); close(r.done) }()
		t.Cleanup(r.stop)
		return r
	}
	ca, cb := dial(t, s), dial(t, s)
	a := startBound(ca, "a")
	waitUntil(t, patience, "a leads", a.IsLeader)
	b := startBound(cb, "b")
	s.waitWaiters(t, 1)
	if b.IsLeader() {
		t.Fatal("both lead")
	}
	if _, err := c.CheckedWrite(ctx, job, 1, []byte("k"), []byte("a")); err != nil {
		t.Fatal(err)
	}

	closed := time.Now()
	_ = ca.Close() // a's connection closes: its lease is released
	waitUntil(t, patience, "b leads", b.IsLeader)
	if d := time.Since(closed); d > closedWithin {
		t.Fatalf("b elected %v after the close: expired, not released", d)
	}
	if tok, _ := b.Token(); tok != 2 {
		t.Fatalf("b token %d", tok)
	}
	if end := tenureEnd(t, s, job, 1); end != pb.Tenure_END_CONNECTION_CLOSED {
		t.Fatalf("tenure 1 ended %v", end)
	}
	var fenced *leasehold.FencedError
	if _, err := c.CheckedWrite(ctx, job, 1, []byte("k"), []byte("old")); !errors.As(err, &fenced) || fenced.CurrentToken != 2 {
		t.Fatalf("the old leader's write: %v", err)
	}
	if _, err := c.CheckedWrite(ctx, job, 2, []byte("k"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	a.stop()
	b.stop() // resigns: releases
	if got := b.rec.get(); !slices.Equal(got, []string{"elected 2", "lost 2"}) {
		t.Fatalf("b's callbacks %v", got)
	}
	if l, _ := c.GetLease(ctx, job); l.Holder != "" || l.Token != 2 {
		t.Fatalf("not released: %+v", l)
	}
	if end := tenureEnd(t, s, job, 2); end != pb.Tenure_END_RELEASED {
		t.Fatalf("tenure 2 ended %v", end)
	}
}
