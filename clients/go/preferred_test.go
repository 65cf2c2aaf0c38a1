package leasehold_test

import (
	"context"
	"slices"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// startWith runs an Elector made with cfg (its Callbacks a recorder's,
// its Logger quiet) in its own goroutine.
func startWith(t *testing.T, c *leasehold.Client, cfg leasehold.ElectorConfig) *running {
	t.Helper()
	rec := &recorder{}
	cfg.Callbacks, cfg.Logger = rec.callbacks(), quiet
	e, err := leasehold.NewElector(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Elector: e, cancel: cancel, done: make(chan struct{}), rec: rec}
	go func() { _ = e.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

// waitRenewalsMore waits until the server has renewed n more leases than
// it had when called.
func (s *server) waitRenewalsMore(t *testing.T, n float64) {
	t.Helper()
	s.waitRenewals(t, s.metric(t, "leasehold_renewals_total")+n)
}

// A holder renewing is told successor_waiting while a preferred Acquire
// waits, and not while only plain ones do; Renew (the Lease alone) is
// unchanged.
func TestRenewLeaseSaysWhenAPreferredCandidateWaits(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("successor-waiting")
	ttl := 30 * time.Second
	if a, err := c.Acquire(ctx, job, "a", ttl, 0); err != nil || a.Lease.Token != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	r, err := c.RenewLease(ctx, job, "a", 1, ttl)
	if err != nil || r.SuccessorWaiting || r.Lease.Holder != "a" || r.Lease.Token != 1 || r.Lease.TTL != ttl {
		t.Fatalf("nobody waits: %+v %v", r, err)
	}
	plain := waitAcquire(c, job, "b", ttl, leasehold.Preferred(false))
	s.waitWaiters(t, 1)
	if r, err := c.RenewLease(ctx, job, "a", 1, ttl); err != nil || r.SuccessorWaiting {
		t.Fatalf("a plain waiter: %+v %v", r, err)
	}

	preferred := waitAcquire(c, job, "p", ttl, leasehold.Preferred(true))
	s.waitWaiters(t, 2)
	if r, err := c.RenewLease(ctx, job, "a", 1, ttl); err != nil || !r.SuccessorWaiting || r.Lease.Token != 1 {
		t.Fatalf("a preferred waiter: %+v %v", r, err)
	}
	if l, err := c.Renew(ctx, job, "a", 1, ttl); err != nil || l.Holder != "a" || l.Token != 1 {
		t.Fatalf("Renew: %+v %v", l, err)
	}
	// Nothing was taken from the holder.
	if l, _ := c.GetLease(ctx, job); l.Holder != "a" || l.Token != 1 {
		t.Fatalf("server says %+v", l)
	}

	// It hands over: the preferred one, then nobody preferred waits.
	if l, err := c.TransferLease(ctx, job, "a", 1, "", 0); err != nil || l.Holder != "p" || l.Token != 2 {
		t.Fatalf("transfer: %+v %v", l, err)
	}
	if p := <-preferred; !p.Acquired || p.Lease.Token != 2 {
		t.Fatalf("preferred: %+v", p)
	}
	if err := c.Release(ctx, job, "p", 2); err != nil {
		t.Fatal(err)
	}
	if b := <-plain; !b.Acquired || b.Lease.Token != 3 {
		t.Fatalf("plain: %+v", b)
	}
	if r, err := c.RenewLease(ctx, job, "b", 3, ttl); err != nil || r.SuccessorWaiting {
		t.Fatalf("nobody waits again: %+v %v", r, err)
	}
}

// Preferred waiters are queued ahead of plain ones that came before them,
// and among themselves first come, first served: on each release the
// first preferred waiter is granted, then the plain ones in their order.
func TestAPreferredWaiterIsGrantedFirst(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("preferred-first")
	ttl := 30 * time.Second
	if a, err := c.Acquire(ctx, job, "a", ttl, 0); err != nil || a.Lease.Token != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	b := waitAcquire(c, job, "b", ttl)
	s.waitWaiters(t, 1)
	p1 := waitAcquire(c, job, "p1", ttl, leasehold.Preferred(true))
	s.waitWaiters(t, 2)
	p2 := waitAcquire(c, job, "p2", ttl, leasehold.Preferred(true))
	s.waitWaiters(t, 3)

	holder, token := "a", uint64(1)
	for i, next := range []struct {
		name string
		got  <-chan leasehold.Acquired
	}{{"p1", p1}, {"p2", p2}, {"b", b}} {
		if err := c.Release(ctx, job, holder, token); err != nil {
			t.Fatal(err)
		}
		g := <-next.got
		if !g.Acquired || g.Lease.Holder != next.name || g.Lease.Token != token+1 {
			t.Fatalf("grant %d: %+v, want %s with token %d", i, g, next.name, token+1)
		}
		holder, token = next.name, g.Lease.Token
	}
}

// A preferred leader is not told successor_waiting when another preferred
// candidate waits, and so an elector that is preferred and yields does not
// hand over to one.
func TestAPreferredLeaderIsNotToldOfAnotherPreferredCandidate(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("preferred-leader")
	ttl := 30 * time.Second
	if a, err := c.Acquire(ctx, job, "p", ttl, 0, leasehold.Preferred(true)); err != nil || a.Lease.Token != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	q := waitAcquire(c, job, "q", ttl, leasehold.Preferred(true))
	s.waitWaiters(t, 1)
	if r, err := c.RenewLease(ctx, job, "p", 1, ttl); err != nil || r.SuccessorWaiting || r.Lease.Token != 1 {
		t.Fatalf("a preferred leader: %+v %v", r, err)
	}
	if err := c.Release(ctx, job, "p", 1); err != nil {
		t.Fatal(err)
	}
	if g := <-q; !g.Acquired || g.Lease.Token != 2 {
		t.Fatalf("q: %+v", g)
	}

	// Electors, renewing every second.
	ejob := uniqueJob("preferred-elector")
	ettl := 3 * time.Second
	cfg := leasehold.ElectorConfig{Job: ejob, TTL: ettl, Preferred: true, YieldToPreferred: true}
	cfg.Name = "leader"
	leader := startWith(t, c, cfg)
	waitUntil(t, patience, "the leader leads", leader.IsLeader)
	cfg.Name = "other"
	other := startWith(t, c, cfg)
	s.waitWaiters(t, 1)
	s.waitRenewalsMore(t, 2) // two renewals of the leader, at least one with other waiting
	if tok, ok := leader.Token(); !ok || tok != 1 || other.IsLeader() {
		t.Fatalf("the leader handed over: leader %d %v, other %v", tok, ok, other.rec.get())
	}
	if got := leader.rec.get(); !slices.Equal(got, []string{"elected 1"}) {
		t.Fatalf("leader's callbacks %v", got)
	}
}

// An elector that yields hands over to a preferred elector at its next
// renewal (not to a plain one that waits): the preferred one is elected
// with the next token, ahead of the plain waiter; the yielder reports the
// end of its leadership once, campaigns again, and is not handed the
// lease back while the preferred one leads.
func TestAYieldingElectorHandsOverToAPreferredOne(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("yield")
	ttl := 3 * time.Second // renewals every second
	y := startWith(t, c, leasehold.ElectorConfig{Job: job, Name: "yielder", TTL: ttl, YieldToPreferred: true})
	waitUntil(t, patience, "the yielder leads", y.IsLeader)
	plain := start(t, c, job, "plain", ttl)
	s.waitWaiters(t, 1)
	s.waitRenewalsMore(t, 2) // a plain waiter is not handed the lease
	if tok, ok := y.Token(); !ok || tok != 1 || plain.IsLeader() {
		t.Fatalf("handed over to a plain waiter: %d %v", tok, ok)
	}

	t0 := time.Now()
	p := startWith(t, c, leasehold.ElectorConfig{Job: job, Name: "preferred", TTL: ttl, Preferred: true})
	waitUntil(t, patience, "the preferred one leads", p.IsLeader)
	if d := time.Since(t0); d > ttl {
		t.Fatalf("the preferred one was elected %v after it came: not at the next renewal", d)
	}
	if tok, _ := p.Token(); tok != 2 {
		t.Fatalf("preferred token %d", tok)
	}
	waitUntil(t, patience, "the yielder's loss report", func() bool { return y.rec.has("lost 1") })
	if end := tenureEnd(t, s, job, 1); end != pb.Tenure_END_TRANSFERRED {
		t.Fatalf("tenure 1 ended %v", end)
	}
	s.waitWaiters(t, 2) // plain, and the yielder campaigning again
	// Renewals of the preferred leader: nothing changes hands.
	s.waitRenewalsMore(t, 2)
	if tok, ok := p.Token(); !ok || tok != 2 || y.IsLeader() || plain.IsLeader() {
		t.Fatalf("the preferred leader lost the lead: %d %v", tok, ok)
	}
	if l, _ := c.GetLease(ctx, job); l.Holder != p.Holder() || l.Token != 2 {
		t.Fatalf("server says %+v", l)
	}
	if got := y.rec.get(); !slices.Equal(got, []string{"elected 1", "lost 1"}) {
		t.Fatalf("yielder's callbacks %v", got)
	}
	if got := p.rec.get(); !slices.Equal(got, []string{"elected 2"}) {
		t.Fatalf("preferred one's callbacks %v", got)
	}
	if n := s.metric(t, "leasehold_renew_losses_total"); n != 0 {
		t.Fatalf("%v renewal(s) refused as lost", n)
	}

	// The line goes on in its order: plain, then the yielder.
	p.stop()
	waitUntil(t, patience, "the plain one leads", func() bool { return plain.rec.has("elected 3") })
	plain.stop()
	waitUntil(t, patience, "the yielder leads again", func() bool { return y.rec.has("elected 4") })
	if got := y.rec.get(); !slices.Equal(got, []string{"elected 1", "lost 1", "elected 4"}) {
		t.Fatalf("yielder's callbacks %v", got)
	}
}
