package leasehold_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// nextChange reads one change from an observation, bounded.
func nextChange(t *testing.T, changes <-chan leasehold.LeaseChange) (leasehold.LeaseChange, bool) {
	t.Helper()
	select {
	case ch, ok := <-changes:
		return ch, ok
	case <-time.After(patience):
		t.Fatal("no change came")
		return leasehold.LeaseChange{}, false
	}
}

// Client.Observe: the current state first, then each change (acquired,
// released, expired) in order; cancelling its ctx closes the channel and
// ends it cleanly.
func TestObserveDeliversTheCurrentStateThenEachChange(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("observe")
	octx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, wait := c.Observe(octx, job)
	next := func(kind leasehold.EventKind, holder string, token uint64) {
		t.Helper()
		ch, ok := nextChange(t, changes)
		if !ok || ch.Kind != kind || ch.Lease.Holder != holder || ch.Lease.Token != token || ch.Lease.Job != job {
			t.Fatalf("change %+v (open %v), want %v %q %d", ch, ok, kind, holder, token)
		}
	}
	next(leasehold.EventCurrent, "", 0)
	if _, err := c.Acquire(ctx, job, "a", 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	next(leasehold.EventAcquired, "a", 1)
	if err := c.Release(ctx, job, "a", 1); err != nil {
		t.Fatal(err)
	}
	next(leasehold.EventReleased, "", 1)
	if _, err := c.Acquire(ctx, job, "b", 300*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	next(leasehold.EventAcquired, "b", 2)
	next(leasehold.EventExpired, "", 2)
	cancel()
	if ch, ok := nextChange(t, changes); ok {
		t.Fatalf("a change after the cancel: %+v", ch)
	}
	if err := wait(); err != nil {
		t.Fatalf("a cancelled observation ended with %v", err)
	}
}

// A broken stream surfaces the typed error: the server stops (SIGTERM),
// the channel closes, and wait says why.
func TestObserveEndsWithTheTypedErrorWhenTheServerStops(t *testing.T) {
	s := startServer(t)
	c, job := dial(t, s), uniqueJob("observe-stop")
	changes, wait := c.Observe(context.Background(), job)
	if ch, ok := nextChange(t, changes); !ok || ch.Kind != leasehold.EventCurrent {
		t.Fatalf("first change %+v %v", ch, ok)
	}
	s.signal(syscall.SIGTERM)
	for {
		if _, ok := nextChange(t, changes); !ok {
			break
		}
	}
	err := wait()
	if !errors.Is(err, leasehold.ErrUnavailable) || !leasehold.Retryable(err) {
		t.Fatalf("the observation ended with %v", err)
	}
	t.Logf("ended with %v (shutting down: %v)", err, errors.Is(err, leasehold.ErrShuttingDown))
}

// A watch the server refuses ends the observation with its typed error.
func TestObserveOfAnEmptyJobIsInvalid(t *testing.T) {
	s := startServer(t)
	changes, wait := dial(t, s).Observe(ctxT(t), "")
	if ch, ok := nextChange(t, changes); ok {
		t.Fatalf("a change: %+v", ch)
	}
	var ia *leasehold.InvalidArgumentError
	if err := wait(); !errors.As(err, &ia) || ia.Field != "job" {
		t.Fatalf("wait: %v", err)
	}
}
