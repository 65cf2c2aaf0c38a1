package leasehold_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// A give-back never ends a lease its holder was told it holds. Per round:
// B holds a job and A waits for it; B releases as A's call is cancelled,
// and A asks again at once on the same client (a retry, as an elector
// does). The retry is granted, so A was told that it leads: its lease must
// still be A's, same token, once any give-back of the cancelled call has
// run to its end.
func TestRetryAfterACancelledAcquireKeepsItsGrant(t *testing.T) {
	s := startServer(t)
	a, b := dial(t, s), dial(t, s)
	ctx := ctxT(t)
	ttl := 30 * time.Second
	cancelled := 0
	const rounds = 10
	for i := range rounds {
		job := uniqueJob("retry")
		held, err := b.Acquire(ctx, job, "b", ttl, 0)
		if err != nil || !held.Acquired {
			t.Fatalf("round %d: %v %+v", i, err, held)
		}
		actx, cancel := context.WithCancel(context.Background())
		waited := make(chan error, 1)
		go func() {
			_, err := a.Acquire(actx, job, "a", ttl, 20*time.Second)
			waited <- err
		}()
		s.waitWaiters(t, 1)
		skew := time.Duration(i*137%1000) * time.Microsecond
		go func() {
			if i%2 == 0 {
				time.Sleep(skew)
			}
			cancel()
		}()
		if i%2 == 1 {
			time.Sleep(skew)
		}
		if err := b.Release(ctx, job, "b", held.Lease.Token); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			cancelled++
		}
		retry, err := a.Acquire(ctx, job, "a", ttl, 5*time.Second)
		if err != nil || !retry.Acquired {
			t.Fatalf("round %d: B released; A's retry is granted: %v %+v", i, err, retry)
		}
		waitUntil(t, patience, "the give-back of the cancelled call to end", func() bool { return !givingBack() })
		l, err := a.GetLease(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if l.Holder != "a" || l.Token != retry.Lease.Token {
			t.Fatalf("round %d: A was told it holds token %d, and its lease ended early: holder %q token %d",
				i, retry.Lease.Token, l.Holder, l.Token)
		}
		if err := a.Release(ctx, job, "a", retry.Lease.Token); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds: %d waiting Acquires cancelled before their answer", rounds, cancelled)
}

// givingBack reports whether a give-back of a cancelled waiting Acquire
// is still running: its goroutine is started before the cancelled call
// returns, and ends once it has released the lease or decided not to.
func givingBack() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), "leasehold.(*Client).giveBack(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// ReleaseRequest.give_back releases a grant nobody asked for again, and
// keeps one that was: asked again by a repeated Acquire, or by a Renew. It
// never fails; ReleaseResponse.released says whether it released.
func TestGiveBackReleasesOnlyAGrantNeverAskedForAgain(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	conn, err := grpc.NewClient(s.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	raw := pb.NewLeasesClient(conn)
	ctx := ctxT(t)
	ttl := 30 * time.Second
	job := uniqueJob("giveback")
	releaseOf := func(job, holder string, token uint64, giveBack bool) bool {
		t.Helper()
		r, err := raw.Release(ctx, &pb.ReleaseRequest{Job: job, Holder: holder, Token: token, GiveBack: giveBack})
		if err != nil {
			t.Fatalf("release (give_back %v) does not fail: %v", giveBack, err)
		}
		return r.GetReleased()
	}
	release := func(holder string, token uint64, giveBack bool) bool {
		t.Helper()
		return releaseOf(job, holder, token, giveBack)
	}
	acquire := func() leasehold.Acquired {
		t.Helper()
		r, err := c.Acquire(ctx, job, "a", ttl, 0)
		if err != nil || !r.Acquired {
			t.Fatalf("acquire: %v %+v", err, r)
		}
		return r
	}
	holder := func() string {
		t.Helper()
		l, err := c.GetLease(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		return l.Holder
	}

	// Granted, never asked again: given back, and the job is free.
	first := acquire()
	if !release("a", first.Lease.Token, true) || holder() != "" {
		t.Fatal("a grant never asked for again is given back")
	}

	// Asked again with a repeated Acquire: kept.
	granted := acquire()
	if again := acquire(); again.Lease.Token != granted.Lease.Token {
		t.Fatalf("a re-grant: token %d, then %d", granted.Lease.Token, again.Lease.Token)
	}
	if release("a", granted.Lease.Token, true) || holder() != "a" {
		t.Fatal("a give-back released a grant asked for again by an Acquire")
	}

	// Asked again with a Renew: kept.
	if err := c.Release(ctx, job, "a", granted.Lease.Token); err != nil {
		t.Fatal(err)
	}
	renewed := acquire()
	if _, err := c.Renew(ctx, job, "a", renewed.Lease.Token, ttl); err != nil {
		t.Fatal(err)
	}
	if release("a", renewed.Lease.Token, true) || holder() != "a" {
		t.Fatal("a give-back released a grant asked for again by a Renew")
	}

	// Another holder's, or another token's: nothing changes, no error.
	if release("b", renewed.Lease.Token, true) || release("a", renewed.Lease.Token+1, true) ||
		releaseOf(uniqueJob("never-granted"), "a", 1, true) || holder() != "a" {
		t.Fatal("a give-back of another holder or token released")
	}

	// A plain release says whether it ended the holding.
	if !release("a", renewed.Lease.Token, false) {
		t.Fatal("a plain release of the holding: released")
	}
	if release("a", renewed.Lease.Token, false) {
		t.Fatal("a repeated release changes nothing")
	}
}
