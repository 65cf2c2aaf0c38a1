package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// renewalSizes records the number of renewals in each KeepAlive message
// the client sends.
type renewalSizes struct {
	mu sync.Mutex
	n  []int
}

type countingKeepAlive struct {
	grpc.ClientStream
	z *renewalSizes
}

func (c countingKeepAlive) SendMsg(m any) error {
	if r, ok := m.(*pb.KeepAliveRequest); ok {
		c.z.mu.Lock()
		c.z.n = append(c.z.n, len(r.GetRenewals()))
		c.z.mu.Unlock()
	}
	return c.ClientStream.SendMsg(m)
}

// Client.KeepAlive: a result per renewal, in order, each decided on its
// own; more than 1000 renewals are split across messages.
func TestKeepAliveRenewsManyLeasesWithAResultEach(t *testing.T) {
	s := startServer(t)
	z := &renewalSizes{}
	c, err := leasehold.Dial(s.target, grpc.WithStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			return countingKeepAlive{cs, z}, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t)
	const n = 1001
	ttl := 30 * time.Second
	var renewals []leasehold.KeepAliveRenewal
	for i := range n {
		job := fmt.Sprintf("ka-%04d", i)
		a, err := c.Acquire(ctx, job, "h", ttl, 0)
		if err != nil || !a.Acquired {
			t.Fatalf("acquire %s: %+v %v", job, a, err)
		}
		renewals = append(renewals, leasehold.KeepAliveRenewal{Job: job, Holder: "h", Token: a.Lease.Token, TTL: ttl})
	}
	// A lease lost (released and taken), a token never issued, a TTL the
	// server refuses: each answered alone.
	if err := c.Release(ctx, "ka-0000", "h", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "ka-0000", "thief", ttl, 0); err != nil {
		t.Fatal(err)
	}
	renewals = append(renewals,
		leasehold.KeepAliveRenewal{Job: "ka-0001", Holder: "h", Token: 7, TTL: ttl},
		leasehold.KeepAliveRenewal{Job: "ka-0002", Holder: "h", Token: 1, TTL: time.Millisecond})

	ka, err := c.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ka.Close()
	out, err := ka.Renew(ctx, renewals)
	if err != nil {
		t.Fatal(err)
	}
	if got := func() []int { z.mu.Lock(); defer z.mu.Unlock(); return z.n }(); !slices.Equal(got, []int{1000, 3}) {
		t.Fatalf("messages of %v renewals", got)
	}
	if len(out) != len(renewals) {
		t.Fatalf("%d results for %d renewals", len(out), len(renewals))
	}
	var ll *leasehold.LeaseLostError
	if r := out[0]; r.Kind != leasehold.KeepAliveLeaseLost || r.Lease.Holder != "thief" || r.Lease.Token != 2 ||
		!errors.As(r.Err(), &ll) || ll.CurrentToken != 2 || ll.CurrentHolder != "thief" {
		t.Fatalf("the lost lease: %+v", r)
	}
	for i, r := range out[1:n] {
		if r.Kind != leasehold.KeepAliveRenewed || r.Job != renewals[i+1].Job || r.Lease.Holder != "h" || r.Err() != nil {
			t.Fatalf("result %d: %+v", i+1, r)
		}
	}
	var ut *leasehold.UnknownTokenError
	if r := out[n]; r.Kind != leasehold.KeepAliveUnknownToken || !errors.As(r.Err(), &ut) || ut.CurrentToken != 1 {
		t.Fatalf("the unknown token: %+v", r)
	}
	var ia *leasehold.InvalidArgumentError
	if r := out[n+1]; r.Kind != leasehold.KeepAliveInvalidArgument || r.Field != "ttl" || !errors.As(r.Err(), &ia) || ia.Field != "ttl" {
		t.Fatalf("the bad TTL: %+v", r)
	}
	// An empty renewal is a liveness probe.
	if out, err := ka.Renew(ctx, nil); err != nil || len(out) != 0 {
		t.Fatalf("probe: %v %v", out, err)
	}
}

// A stream the server ends gives its typed error, to this Renew and every
// later one.
func TestKeepAliveEndsWithShuttingDown(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	a, err := c.Acquire(ctx, "ka", "h", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	ka, err := c.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ka.Close()
	batch := []leasehold.KeepAliveRenewal{{Job: "ka", Holder: "h", Token: a.Lease.Token, TTL: 30 * time.Second}}
	if out, err := ka.Renew(ctx, batch); err != nil || out[0].Kind != leasehold.KeepAliveRenewed {
		t.Fatalf("renew: %+v %v", out, err)
	}
	s.signal(syscall.SIGTERM)
	var first error
	waitUntil(t, patience, "the stream ends", func() bool {
		_, first = ka.Renew(ctx, batch)
		return first != nil
	})
	if !errors.Is(first, leasehold.ErrUnavailable) {
		t.Fatalf("renew after SIGTERM: %v", first)
	}
	if _, err := ka.Renew(ctx, batch); err != first {
		t.Fatalf("a later renew: %v, want %v", err, first)
	}
}
