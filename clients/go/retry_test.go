package leasehold_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// counting is a slog.Handler that counts warnings and debug records (one
// per failed attempt).
type counting struct{ warnings, attempts *atomic.Int64 }

func (h counting) Enabled(context.Context, slog.Level) bool { return true }
func (h counting) Handle(_ context.Context, r slog.Record) error {
	switch r.Level {
	case slog.LevelWarn:
		h.warnings.Add(1)
	case slog.LevelDebug:
		h.attempts.Add(1)
	}
	return nil
}
func (h counting) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h counting) WithGroup(string) slog.Handler      { return h }

// The server killed under a leader for 5 s: the elector's retries back off
// (a bounded number of attempts and warnings), it steps down by its
// deadline, and it leads again soon after the server is back on the same
// port and data dir.
func TestOutageIsRetriedWithBackoffAndTheElectorLeadsAgainWhenTheServerIsBack(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	h := counting{warnings: new(atomic.Int64), attempts: new(atomic.Int64)}
	ttl := 2 * time.Second
	e, err := leasehold.NewElector(c, leasehold.ElectorConfig{Job: "outage", Name: "e", TTL: ttl, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, patience, "election", e.IsLeader)
	first, _ := e.Token()

	s.kill()
	killed := time.Now()
	waitUntil(t, patience, "the step-down by its deadline", func() bool { return !e.IsLeader() })
	// The outage lasts 5 s, past the deadline and into the campaign's
	// backoff.
	time.Sleep(5*time.Second - time.Since(killed))
	warnings, attempts := h.warnings.Load(), h.attempts.Load()
	t.Logf("5 s outage: %d failed attempts, %d warnings", attempts, warnings)
	if attempts > 25 || warnings > 4 {
		t.Fatalf("not backing off: %d attempts, %d warnings in a 5 s outage", attempts, warnings)
	}

	s.restart(t)
	back := time.Now()
	waitUntil(t, patience, "re-election", e.IsLeader)
	t.Logf("re-elected %v after the server was back", time.Since(back))
	if token, _ := e.Token(); token < first {
		t.Fatalf("token %d after %d", token, first)
	}
}

// A call cancelled by its context fails with an error that matches
// context.Canceled (or DeadlineExceeded) and is not Retryable.
func TestCancelledCallsMatchTheContextError(t *testing.T) {
	s := startServer(t)
	c, job := dial(t, s), uniqueJob("ctx")
	if _, err := c.Acquire(ctxT(t), job, "a", 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.waitWaiters(t, 1); cancel() }()
	_, err := c.Acquire(ctx, job, "b", 30*time.Second, 10*time.Second)
	if !errors.Is(err, context.Canceled) || leasehold.Retryable(err) {
		t.Fatalf("cancelled: %v (retryable %v)", err, leasehold.Retryable(err))
	}
	var ce *leasehold.ContextError
	if !errors.As(err, &ce) {
		t.Fatalf("not a *ContextError: %T", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	_, err = c.Acquire(dctx, job, "b", 30*time.Second, 10*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) || leasehold.Retryable(err) {
		t.Fatalf("timed out: %v (retryable %v)", err, leasehold.Retryable(err))
	}
}

// Per round: A holds a job, B waits for it on its own connection, then A
// releases and B's call is cancelled at the same instant. The job must
// never stay held by B unless B's call returned the grant.
func TestCancelledWaitingAcquireGivesBackAGrantItWasGiven(t *testing.T) {
	s := startServer(t)
	a := dial(t, s)
	ctx := ctxT(t)
	ttl := 30 * time.Second
	told, givenBack := 0, 0
	for i := range 50 {
		job := uniqueJob("cancel")
		held, err := a.Acquire(ctx, job, "a", ttl, 0)
		if err != nil || !held.Acquired {
			t.Fatalf("round %d: %v %+v", i, err, held)
		}
		b := dial(t, s)
		bctx, cancel := context.WithCancel(context.Background())
		got := make(chan leasehold.Acquired, 1)
		go func() {
			r, err := b.Acquire(bctx, job, "b", ttl, 20*time.Second)
			if err == nil {
				got <- r
			}
			close(got)
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
		if err := a.Release(ctx, job, "a", held.Lease.Token); err != nil {
			t.Fatal(err)
		}
		if r, ok := <-got; ok && r.Acquired {
			told++
			continue
		}
		waitUntil(t, patience, "round "+job+": the job free again, not held by a cancelled B", func() bool {
			l, err := a.GetLease(ctx, job)
			if err == nil && l.Holder == "" && l.Token > held.Lease.Token {
				givenBack++
			}
			return err == nil && l.Holder == ""
		})
	}
	t.Logf("50 rounds: %d grants reached B before the cancel, %d grants to a cancelled B given back", told, givenBack)
}
