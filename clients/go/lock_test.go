package leasehold_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// Client.WithLock: a scoped critical section, against a real server.

// lockResult is what a WithLock in its own goroutine returned.
type lockResult struct {
	err  error
	lock *leasehold.Lock
}

// lockAsync runs WithLock in a goroutine; fn runs under the lock.
func lockAsync(ctx context.Context, c *leasehold.Client, job string, ttl time.Duration, fn func(context.Context, *leasehold.Lock) error) <-chan lockResult {
	out := make(chan lockResult, 1)
	go func() {
		var held *leasehold.Lock
		err := c.WithLock(ctx, job, ttl, func(ctx context.Context, lock *leasehold.Lock) error {
			held = lock
			return fn(ctx, lock)
		}, leasehold.LockLogger(quiet))
		out <- lockResult{err, held}
	}()
	return out
}

func waitLock(t *testing.T, ch <-chan lockResult) lockResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(2 * patience):
		t.Fatal("WithLock did not return")
		return lockResult{}
	}
}

// It waits for the holder to leave (its waiting Acquire is granted at the
// release), runs the func with the next token, and releases on return.
func TestLockWaitsForTheHolderToLeaveAndReleasesOnReturn(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("lock-wait")
	if a, err := c.Acquire(ctx, job, "other", 60*time.Second, 0); err != nil || !a.Acquired {
		t.Fatalf("other: %+v %v", a, err)
	}
	entered := make(chan *leasehold.Lock, 1)
	done := lockAsync(context.Background(), c, job, 10*time.Second, func(ctx context.Context, lock *leasehold.Lock) error {
		entered <- lock
		if l, err := c.GetLease(ctx, job); err != nil || l.Holder != lock.Holder() || l.Token != lock.Token() {
			return errors.New("the server does not say it is ours")
		}
		return nil
	})
	s.waitWaiters(t, 1)
	select {
	case <-entered:
		t.Fatal("entered while another held the lease")
	default:
	}
	if err := c.Release(ctx, job, "other", 1); err != nil {
		t.Fatal(err)
	}
	r := waitLock(t, done)
	if r.err != nil {
		t.Fatalf("WithLock: %v", r.err)
	}
	lock := <-entered
	if lock.Token() != 2 || !strings.HasPrefix(lock.Holder(), leasehold.DefaultLockName+"@") || lock.Job() != job {
		t.Fatalf("lock %v", lock)
	}
	if lock.IsHeld() || lock.Err() != nil {
		t.Fatalf("after return: held %v, err %v", lock.IsHeld(), lock.Err())
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" || l.Token != 2 {
		t.Fatalf("not released: %+v %v", l, err)
	}
}

// Two locks with one name on one job are two holders: the second waits
// for the first.
func TestTwoLocksWithOneNameExcludeEachOther(t *testing.T) {
	s := startServer(t)
	c, job := dial(t, s), uniqueJob("lock-twins")
	inFirst, leaveFirst := make(chan *leasehold.Lock, 1), make(chan struct{})
	first := lockAsync(context.Background(), c, job, 10*time.Second, func(ctx context.Context, lock *leasehold.Lock) error {
		inFirst <- lock
		<-leaveFirst
		return nil
	})
	a := <-inFirst
	inSecond := make(chan *leasehold.Lock, 1)
	second := lockAsync(context.Background(), c, job, 10*time.Second, func(ctx context.Context, lock *leasehold.Lock) error {
		inSecond <- lock
		return nil
	})
	s.waitWaiters(t, 1)
	if len(inSecond) != 0 {
		t.Fatal("both locks entered")
	}
	close(leaveFirst)
	if r := waitLock(t, first); r.err != nil {
		t.Fatal(r.err)
	}
	if r := waitLock(t, second); r.err != nil {
		t.Fatal(r.err)
	}
	b := <-inSecond
	if a.Holder() == b.Holder() || a.Token() != 1 || b.Token() != 2 {
		t.Fatalf("first %v, second %v", a, b)
	}
}

// The lease is renewed every TTL/3 while the func runs: the lock is held
// across several TTLs, and the server agrees.
func TestLockRenewsAcrossSeveralTTLs(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("lock-renew")
	// Renewals every 1.5 s of a 4.5 s lease: a stall between two of them
	// does not end it.
	ttl := 4500 * time.Millisecond
	err := c.WithLock(context.Background(), job, ttl, func(lctx context.Context, lock *leasehold.Lock) error {
		entered := time.Now()
		waitUntil(t, 3*patience, "three TTLs under the lock", func() bool {
			if !lock.IsHeld() {
				t.Fatalf("lost the lock: %v", lock.Err())
			}
			return time.Since(entered) > 3*ttl && s.metric(t, "leasehold_renewals_total") >= 6
		})
		if l, err := c.GetLease(ctx, job); err != nil || l.Holder != lock.Holder() || l.Token != 1 {
			t.Fatalf("server says %+v %v", l, err)
		}
		return lctx.Err()
	}, leasehold.LockLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" {
		t.Fatalf("not released: %+v %v", l, err)
	}
}

// An error or a panic leaves the critical section too: the lease is
// released, and the error (the panic) goes on unchanged.
func TestLockReleasesOnAnErrorAndOnAPanic(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("lock-error")
	boom := errors.New("boom")
	err := c.WithLock(ctx, job, 10*time.Second, func(context.Context, *leasehold.Lock) error { return boom }, leasehold.LockLogger(quiet))
	if err != boom {
		t.Fatalf("WithLock returned %v, want the func's error", err)
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" || l.Token != 1 {
		t.Fatalf("not released after the error: %+v %v", l, err)
	}
	recovered := func() (p any) {
		defer func() { p = recover() }()
		_ = c.WithLock(ctx, job, 10*time.Second, func(context.Context, *leasehold.Lock) error { panic("kaboom") }, leasehold.LockLogger(quiet))
		return nil
	}()
	if recovered != "kaboom" {
		t.Fatalf("the panic: %v", recovered)
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" || l.Token != 2 {
		t.Fatalf("not released after the panic: %+v %v", l, err)
	}
}

// A loss is reported: the chaos API expires the lease, the lock's next
// renewal is LEASE_LOST, the func's ctx is cancelled with a
// *LockLostError as its cause, and WithLock returns it (with the func's
// own error inside). A write with the lock's token is then fenced.
func TestLockReportsALossAndItsWritesAreFenced(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("lock-lost")
	var token uint64
	var cause error
	var expired time.Time
	err := c.WithLock(context.Background(), job, chaosTTL, func(lctx context.Context, lock *leasehold.Lock) error {
		token = lock.Token()
		if _, err := c.CheckedWrite(lctx, job, token, []byte("k"), []byte("under the lock")); err != nil {
			return err
		}
		expired = time.Now()
		if _, err := c.Chaos().Expire(ctx, job); err != nil {
			return err
		}
		select {
		case <-lctx.Done():
		case <-time.After(2 * patience):
			return errors.New("the loss was not reported")
		}
		select {
		case <-lock.Lost():
		default:
			return errors.New("Lost() is not closed")
		}
		if lock.IsHeld() {
			return errors.New("still held after the loss")
		}
		cause = context.Cause(lctx)
		return lctx.Err()
	}, leasehold.LockLogger(quiet))
	// Reported by the renewal (every TTL/3), not by our own deadline.
	if d := time.Since(expired); d >= 2*chaosTTL/3 {
		t.Fatalf("the loss was reported %v after the expiry", d)
	}
	var lost *leasehold.LockLostError
	if !errors.As(err, &lost) || !errors.Is(err, leasehold.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("WithLock returned %v", err)
	}
	var ll *leasehold.LeaseLostError
	if lost.Job != job || lost.Token != token || lost.DeadlinePassed || !errors.As(lost.Cause, &ll) || !errors.Is(lost.Err, context.Canceled) {
		t.Fatalf("lost %+v", lost)
	}
	if !errors.As(cause, &lost) {
		t.Fatalf("the func's ctx's cause: %v", cause)
	}
	// Another holder takes the job; the lock's token is fenced.
	if a, err := c.Acquire(ctx, job, "next", 30*time.Second, 0); err != nil || !a.Acquired || a.Lease.Token != token+1 {
		t.Fatalf("next: %+v %v", a, err)
	}
	_, err = c.CheckedWrite(ctx, job, token, []byte("k"), []byte("late"))
	var fenced *leasehold.FencedError
	if !errors.As(err, &fenced) || fenced.CurrentToken != token+1 {
		t.Fatalf("a write with the lost lock's token: %v", err)
	}
}

// With the server frozen no renewal succeeds: the lock is lost at its own
// deadline (the last renewal's send time plus the TTL), on its own.
func TestLockIsLostAtItsDeadlineWhenTheServerIsPaused(t *testing.T) {
	s := startServer(t)
	c, job := dial(t, s), uniqueJob("lock-paused")
	ttl := 4 * time.Second
	var stopped time.Time
	err := c.WithLock(context.Background(), job, ttl, func(lctx context.Context, lock *leasehold.Lock) error {
		s.waitRenewals(t, 1) // its deadline is now a renewal's
		s.signal(syscall.SIGSTOP)
		stopped = time.Now()
		<-lctx.Done()
		return nil
	}, leasehold.LockLogger(quiet))
	defer s.signal(syscall.SIGCONT)
	if after := time.Since(stopped); after > ttl+ttl/2 {
		t.Fatalf("lost %v after the freeze", after)
	}
	var lost *leasehold.LockLostError
	if !errors.As(err, &lost) || !lost.DeadlinePassed || lost.Err != nil {
		t.Fatalf("WithLock returned %v", err)
	}
}

// A ctx that ends while the lock waits: WithLock returns the context's
// error (typed), the func never runs, and nothing is left held.
func TestLockTimeoutWhileWaitingLeavesNothingHeld(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("lock-timeout")
	if a, err := c.Acquire(ctx, job, "other", 60*time.Second, 0); err != nil || !a.Acquired {
		t.Fatalf("other: %+v %v", a, err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ran := false
	err := c.WithLock(wctx, job, 10*time.Second, func(context.Context, *leasehold.Lock) error { ran = true; return nil },
		leasehold.LockLogger(quiet))
	var ce *leasehold.ContextError
	if !errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded) || leasehold.Retryable(err) || ran {
		t.Fatalf("WithLock returned %v (ran %v)", err, ran)
	}
	// Nothing waits, and once the holder leaves, nothing is held.
	waitUntil(t, patience, "no queued acquire", func() bool { return s.metric(t, "leasehold_waiting_acquires") == 0 })
	if err := c.Release(ctx, job, "other", 1); err != nil {
		t.Fatal(err)
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" || l.Token != 1 {
		t.Fatalf("lease %+v %v", l, err)
	}
}

func TestWithLockRefusesBadArguments(t *testing.T) {
	c, err := leasehold.Dial("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fn := func(context.Context, *leasehold.Lock) error { t.Fatal("ran"); return nil }
	for _, tc := range []struct {
		job, name, field string
		ttl              time.Duration
	}{
		{"", "n", "job", time.Second},
		{"j", "n", "ttl", 0},
		{"j", "", "holder", time.Second},
	} {
		err := c.WithLock(ctxT(t), tc.job, tc.ttl, fn, leasehold.LockName(tc.name))
		var ia *leasehold.InvalidArgumentError
		if !errors.As(err, &ia) || ia.Field != tc.field {
			t.Errorf("%+v: %v", tc, err)
		}
	}
}
