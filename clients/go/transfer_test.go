package leasehold_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// history is the job's history of leaders, newest first, read with the
// generated stub over a connection of its own.
func history(t *testing.T, s *server, job string) []*pb.Tenure {
	t.Helper()
	conn, err := grpc.NewClient(s.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := pb.NewLeasesClient(conn).GetHistory(ctxT(t), &pb.GetHistoryRequest{Job: job})
	if err != nil {
		t.Fatalf("GetHistory: %v", err)
	}
	return r.GetTenures()
}

// tenureEnd is how the tenure of token ended, as the job's history says.
func tenureEnd(t *testing.T, s *server, job string, token uint64) pb.Tenure_End {
	t.Helper()
	for _, tenure := range history(t, s, job) {
		if tenure.GetToken() == token {
			return tenure.GetEnd()
		}
	}
	t.Fatalf("no tenure of token %d in the history of %s", token, job)
	return 0
}

// waitAcquire is a waiting Acquire in its own goroutine, with opts.
func waitAcquire(c *leasehold.Client, job, holder string, ttl time.Duration, opts ...leasehold.AcquireOption) <-chan leasehold.Acquired {
	got := make(chan leasehold.Acquired, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
		defer cancel()
		a, _ := c.Acquire(ctx, job, holder, ttl, patience, opts...)
		got <- a
	}()
	return got
}

// The leader hands over to the elector that waits: it is elected with the
// next token at once, the old leader reports the end of its leadership
// once (its renewals of the old token do not report it again), and it
// campaigns again behind its successor.
func TestTransferHandsTheLeadToTheWaitingElector(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("transfer")
	// Renewals every 2 s: one is due while the test watches for a second
	// loss report; the lease outlasts a stall.
	ttl := 6 * time.Second
	a := start(t, c, job, "a", ttl)
	waitUntil(t, patience, "a leads", a.IsLeader)
	b := start(t, c, job, "b", ttl)
	s.waitWaiters(t, 1)

	t0 := time.Now()
	l, err := a.Transfer(ctx, "")
	if err != nil || l.Holder != b.Holder() || l.Token != 2 || l.Job != job {
		t.Fatalf("transfer: %+v %v", l, err)
	}
	if a.IsLeader() {
		t.Fatal("still leads after the transfer returned")
	}
	waitUntil(t, patience, "the successor leads", b.IsLeader)
	if d := time.Since(t0); d > ttl/2 {
		t.Fatalf("the successor was elected %v after the transfer", d)
	}
	if tok, _ := b.Token(); tok != 2 {
		t.Fatalf("successor token %d", tok)
	}
	waitUntil(t, patience, "the loss report", func() bool { return a.rec.has("lost 1") })
	s.waitWaiters(t, 1) // a campaigns again, queued behind b
	// A renewal period and more: nothing else is reported, and no renewal
	// of the old token was even sent.
	time.Sleep(ttl/3 + ttl/6)
	if got := a.rec.get(); !slices.Equal(got, []string{"elected 1", "lost 1"}) {
		t.Fatalf("old leader's callbacks %v", got)
	}
	if got := b.rec.get(); !slices.Equal(got, []string{"elected 2"}) {
		t.Fatalf("successor's callbacks %v", got)
	}
	if n := s.metric(t, "leasehold_renew_losses_total"); n != 0 {
		t.Fatalf("%v renewal(s) refused as lost", n)
	}
	if end := tenureEnd(t, s, job, 1); end != pb.Tenure_END_TRANSFERRED {
		t.Fatalf("tenure 1 ended %v", end)
	}
	if _, err := c.CheckedWrite(ctx, job, 1, []byte("k"), []byte("old")); !errors.Is(err, leasehold.ErrFenced) {
		t.Fatalf("the old leader's write: %v", err)
	}
	// The old leader's campaign goes on: b resigns, a leads again.
	b.stop()
	waitUntil(t, patience, "a leads again", func() bool { return a.rec.has("elected 3") })
	if got := a.rec.get(); !slices.Equal(got, []string{"elected 1", "lost 1", "elected 3"}) {
		t.Fatalf("old leader's callbacks %v", got)
	}
}

// With two electors waiting, the leader hands over to the one it names,
// the second in line; the first keeps waiting.
func TestTransferToANamedWaiter(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("transfer-to")
	ttl := 30 * time.Second
	a := start(t, c, job, "a", ttl)
	waitUntil(t, patience, "a leads", a.IsLeader)
	first := start(t, c, job, "first", ttl)
	s.waitWaiters(t, 1)
	second := start(t, c, job, "second", ttl)
	s.waitWaiters(t, 2)

	l, err := a.Transfer(ctx, second.Holder())
	if err != nil || l.Holder != second.Holder() || l.Token != 2 {
		t.Fatalf("transfer: %+v %v", l, err)
	}
	waitUntil(t, patience, "the named waiter leads", second.IsLeader)
	if tok, _ := second.Token(); tok != 2 {
		t.Fatalf("token %d", tok)
	}
	waitUntil(t, patience, "the loss report", func() bool { return a.rec.has("lost 1") })
	s.waitWaiters(t, 2) // first, and a behind it
	if first.IsLeader() || len(first.rec.get()) != 0 {
		t.Fatalf("the first in line was elected: %v", first.rec.get())
	}
	if g, _ := c.GetLease(ctx, job); g.Holder != second.Holder() || g.Token != 2 {
		t.Fatalf("server says %+v", g)
	}
}

// With nobody waiting, or not the holder named, a transfer fails with
// NO_SUCCESSOR and the leader goes on leading; then it hands over to the
// waiter it names. Transfer when not leading asks nothing of the server.
func TestTransferWithNoSuccessorKeepsLeading(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("no-successor")
	ttl := 30 * time.Second
	a := start(t, c, job, "a", ttl)
	waitUntil(t, patience, "a leads", a.IsLeader)

	_, err := a.Transfer(ctx, "")
	var none *leasehold.NoSuccessorError
	if !errors.As(err, &none) || !errors.Is(err, leasehold.ErrNoSuccessor) || errors.Is(err, leasehold.ErrLeaseLost) ||
		status.Code(err) != codes.FailedPrecondition || leasehold.Retryable(err) {
		t.Fatalf("transfer with nobody waiting: %#v", err)
	}
	if tok, ok := a.Token(); !ok || tok != 1 {
		t.Fatalf("stopped leading: %d %v", tok, ok)
	}
	got := waitAcquire(c, job, "w", ttl)
	s.waitWaiters(t, 1)
	if _, err := a.Transfer(ctx, "nobody"); !errors.As(err, &none) {
		t.Fatalf("transfer to a holder that does not wait: %#v", err)
	}
	if tok, ok := a.Token(); !ok || tok != 1 {
		t.Fatalf("stopped leading: %d %v", tok, ok)
	}
	if l, _ := c.GetLease(ctx, job); l.Holder != a.Holder() || l.Token != 1 {
		t.Fatalf("server says %+v", l)
	}
	if got := a.rec.get(); !slices.Equal(got, []string{"elected 1"}) {
		t.Fatalf("callbacks %v", got)
	}

	l, err := a.Transfer(ctx, "w")
	if err != nil || l.Holder != "w" || l.Token != 2 {
		t.Fatalf("transfer to w: %+v %v", l, err)
	}
	if w := <-got; !w.Acquired || w.Lease.Token != 2 {
		t.Fatalf("w: %+v", w)
	}
	if _, err := a.Transfer(ctx, ""); !errors.Is(err, leasehold.ErrNotLeader) {
		t.Fatalf("transfer when not leading: %v", err)
	}
	waitUntil(t, patience, "the loss report", func() bool { return a.rec.has("lost 1") })
}

// An elector that never ran does not lead: Transfer returns ErrNotLeader
// without a call (its client is nil: a call would panic).
func TestTransferWhenNotLeadingCallsNothing(t *testing.T) {
	e, err := leasehold.NewElector(nil, leasehold.ElectorConfig{Job: "j", Name: "n", TTL: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Transfer(context.Background(), ""); !errors.Is(err, leasehold.ErrNotLeader) {
		t.Fatalf("%v", err)
	}
}

// An elector whose lease was lost behind its back learns it from the
// transfer: LEASE_LOST, it steps down and campaigns again.
func TestTransferOfALostLeaseStepsDown(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("transfer-lost")
	// Its next renewal is 10 s away: the transfer learns of the loss first.
	ttl := 30 * time.Second
	a := start(t, c, job, "a", ttl)
	waitUntil(t, patience, "a leads", a.IsLeader)
	thief := waitAcquire(c, job, "thief", ttl)
	s.waitWaiters(t, 1)
	if err := c.Release(ctx, job, a.Holder(), 1); err != nil {
		t.Fatal(err)
	}
	if got := <-thief; !got.Acquired || got.Lease.Token != 2 {
		t.Fatalf("thief: %+v", got)
	}
	_, err := a.Transfer(ctx, "")
	var lost *leasehold.LeaseLostError
	if !errors.As(err, &lost) || lost.CurrentToken != 2 || lost.CurrentHolder != "thief" {
		t.Fatalf("transfer of a lost lease: %#v", err)
	}
	if a.IsLeader() {
		t.Fatal("still leads")
	}
	waitUntil(t, patience, "the loss report", func() bool { return a.rec.has("lost 1") })
	s.waitWaiters(t, 1) // campaigning again
	if err := c.Release(ctx, job, "thief", 2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, patience, "re-election", func() bool { return a.rec.has("elected 3") })
	if got := a.rec.get(); !slices.Equal(got, []string{"elected 1", "lost 1", "elected 3"}) {
		t.Fatalf("callbacks %v", got)
	}
}

// Client.TransferLease hands over to the first waiter (its waiting
// Acquire returns at once, with the TTL asked for); a stale token is
// LEASE_LOST; with nobody waiting, NO_SUCCESSOR changes nothing.
func TestTransferLease(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("transfer-lease")
	if a, err := c.Acquire(ctx, job, "a", 30*time.Second, 0); err != nil || a.Lease.Token != 1 {
		t.Fatalf("%+v %v", a, err)
	}
	got := waitAcquire(c, job, "b", 30*time.Second)
	s.waitWaiters(t, 1)
	t0 := time.Now()
	l, err := c.TransferLease(ctx, job, "a", 1, "", 20*time.Second)
	if err != nil || l.Holder != "b" || l.Token != 2 || l.TTL != 20*time.Second {
		t.Fatalf("transfer: %+v %v", l, err)
	}
	if b := <-got; !b.Acquired || b.Lease.Token != 2 || time.Since(t0) > 10*time.Second {
		t.Fatalf("waiter: %+v after %v", b, time.Since(t0))
	}

	_, err = c.TransferLease(ctx, job, "a", 1, "", 0)
	var lost *leasehold.LeaseLostError
	if !errors.As(err, &lost) || !errors.Is(err, leasehold.ErrLeaseLost) || lost.CurrentToken != 2 ||
		lost.CurrentHolder != "b" || status.Code(err) != codes.FailedPrecondition || leasehold.Retryable(err) {
		t.Fatalf("stale token: %#v", err)
	}
	_, err = c.TransferLease(ctx, job, "b", 2, "", 0)
	if !errors.Is(err, leasehold.ErrNoSuccessor) {
		t.Fatalf("nobody waits: %#v", err)
	}
	if l, _ := c.GetLease(ctx, job); l.Holder != "b" || l.Token != 2 {
		t.Fatalf("after NO_SUCCESSOR: %+v", l)
	}
	if end := tenureEnd(t, s, job, 1); end != pb.Tenure_END_TRANSFERRED {
		t.Fatalf("tenure 1 ended %v", end)
	}
}
