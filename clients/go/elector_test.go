package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder collects callbacks in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) { r.mu.Lock(); r.events = append(r.events, s); r.mu.Unlock() }
func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}
func (r *recorder) has(s string) bool { return slices.Contains(r.get(), s) }

func (r *recorder) callbacks() leasehold.LeaderCallbacks {
	return leasehold.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context, token uint64) { r.add(fmt.Sprintf("elected %d", token)) },
		OnStoppedLeading: func(token uint64) { r.add(fmt.Sprintf("lost %d", token)) },
	}
}

// running is an Elector in its own goroutine.
type running struct {
	*leasehold.Elector
	cancel context.CancelFunc
	done   chan struct{}
	rec    *recorder
}

func start(t *testing.T, c *leasehold.Client, job, name string, ttl time.Duration) *running {
	t.Helper()
	rec := &recorder{}
	e, err := leasehold.NewElector(c, leasehold.ElectorConfig{Job: job, Name: name, TTL: ttl, Callbacks: rec.callbacks(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Elector: e, cancel: cancel, done: make(chan struct{}), rec: rec}
	go func() { e.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

// stop cancels Run's context and waits for it to return.
func (r *running) stop() {
	r.cancel()
	<-r.done
}

func TestExactlyOneOfTwoLeadsAndResignHandsOver(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	// The hand-over by the release is told from one by expiry by a bound
	// of a third of the TTL, longer than a stall.
	ttl := 30 * time.Second
	a := start(t, c, "two", "a", ttl)
	b := start(t, c, "two", "b", ttl)
	if a.Holder() == b.Holder() {
		t.Fatal("same holder")
	}
	waitUntil(t, patience, "a leader", func() bool { return a.IsLeader() || b.IsLeader() })
	leader, follower := a, b
	if b.IsLeader() {
		leader, follower = b, a
	}
	if tok, _ := leader.Token(); tok != 1 {
		t.Fatalf("token %d", tok)
	}
	s.waitWaiters(t, 1)
	if follower.IsLeader() {
		t.Fatal("both lead")
	}
	if l, _ := c.GetLease(ctx, "two"); l.Holder != leader.Holder() {
		t.Fatalf("server says %+v", l)
	}
	t0 := time.Now()
	leader.stop() // cancel: releases
	waitUntil(t, patience, "the hand-over", func() bool { return follower.IsLeader() })
	if d := time.Since(t0); d > ttl/3 {
		t.Fatalf("hand-over came from expiry, not the release: %v", d)
	}
	if tok, _ := follower.Token(); tok != 2 {
		t.Fatalf("follower token %d", tok)
	}
	if got := leader.rec.get(); !slices.Equal(got, []string{"elected 1", "lost 1"}) {
		t.Fatalf("leader callbacks %v", got)
	}
	follower.stop()
	if got := follower.rec.get(); !slices.Equal(got, []string{"elected 2", "lost 2"}) {
		t.Fatalf("follower callbacks %v", got)
	}
	if l, _ := c.GetLease(ctx, "two"); l.Holder != "" || l.Token != 2 {
		t.Fatalf("not released: %+v", l)
	}
}

func TestLeaderContextIsCancelledOnStepDown(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	workEnded := make(chan time.Time, 1)
	e, err := leasehold.NewElector(c, leasehold.ElectorConfig{
		Job: "ctx", Name: "w", TTL: 10 * time.Second, Logger: quiet,
		Callbacks: leasehold.LeaderCallbacks{OnStartedLeading: func(ctx context.Context, token uint64) {
			<-ctx.Done()
			workEnded <- time.Now()
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	waitUntil(t, patience, "election", e.IsLeader)
	cancel()
	<-done
	select {
	case <-workEnded: // Run returned only after the work did
	default:
		t.Fatal("Run returned before OnStartedLeading")
	}
}

func TestKeepsLeadingAcrossRenewals(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	// Renewals go out every 3 s, and the lease lasts 9 s: a stall
	// between two of them does not end it.
	ttl := 9 * time.Second
	e := start(t, c, "renewals", "r", ttl)
	waitUntil(t, patience, "election", e.IsLeader)
	// Four renewals, TTL/3 apart: it leads past the TTL of its grant.
	waitUntil(t, 2*patience, "4 renewals", func() bool {
		if tok, ok := e.Token(); !ok || tok != 1 {
			t.Fatalf("lost the lead: %d %v (events %v)", tok, ok, e.rec.get())
		}
		return s.metric(t, "leasehold_renewals_total") >= 4
	})
	if tok, ok := e.Token(); !ok || tok != 1 {
		t.Fatalf("lost the lead: %d %v (events %v)", tok, ok, e.rec.get())
	}
	if l, err := c.GetLease(ctxT(t), "renewals"); err != nil || l.Holder != e.Holder() || l.Token != 1 {
		t.Fatalf("server says %+v %v", l, err)
	}
	if got := e.rec.get(); !slices.Equal(got, []string{"elected 1"}) {
		t.Fatalf("events %v", got)
	}
}

func TestLateGrantIsConfirmedNotDropped(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	// The elector's waiting Acquire waits up to 3*TTL (18 s); it is
	// granted 1.5*TTL after it was sent, past its TTL. A TTL of 6 s
	// outlasts a stall between the renewals that follow.
	ttl := 6 * time.Second
	_, _ = c.Acquire(ctx, "late", "other", 60*time.Second, 0)
	e := start(t, c, "late", "late", ttl)
	s.waitWaiters(t, 1)
	time.Sleep(ttl * 3 / 2) // the waiting Acquire ages past a TTL
	if err := c.Release(ctx, "late", "other", 1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, patience, "election", e.IsLeader)
	// The confirming renewal and three more, TTL/3 apart: it leads past a
	// TTL after the grant.
	waitUntil(t, 2*patience, "4 renewals", func() bool {
		if tok, ok := e.Token(); !ok || tok != 2 {
			t.Fatalf("token %d %v (events %v)", tok, ok, e.rec.get())
		}
		return s.metric(t, "leasehold_renewals_total") >= 4
	})
	if tok, ok := e.Token(); !ok || tok != 2 {
		t.Fatalf("token %d %v", tok, ok)
	}
	if got := e.rec.get(); !slices.Equal(got, []string{"elected 2"}) {
		t.Fatalf("stepped down after the late grant: %v", got)
	}
}

func TestLeaseLostOnRenewStepsDownAndCampaignsAgain(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	// The elector's lease outlives the steps before the theft; it learns
	// of the theft from its next renewal, TTL/3 (3 s) later.
	e := start(t, c, "again", "again", 9*time.Second)
	waitUntil(t, patience, "election", e.IsLeader)
	// Hand the lease to a waiting thief behind the elector's back: the
	// release grants the queued waiter in the same step.
	thief := make(chan leasehold.Acquired, 1)
	go func() {
		a, _ := c.Acquire(ctx, "again", "thief", 60*time.Second, patience)
		thief <- a
	}()
	s.waitWaiters(t, 1)
	if err := c.Release(ctx, "again", e.Holder(), 1); err != nil {
		t.Fatal(err)
	}
	if a := <-thief; !a.Acquired || a.Lease.Token != 2 {
		t.Fatalf("thief: %+v", a)
	}
	waitUntil(t, patience, "the step-down", func() bool { return e.rec.has("lost 1") })
	// It stepped down because its renewal was refused, not by its own
	// deadline: the server refused a renewal with LEASE_LOST.
	if n := s.metric(t, "leasehold_renew_losses_total"); n < 1 {
		t.Fatalf("stepped down without a lost renewal (renew losses %v)", n)
	}
	// The elector campaigns again: its waiting Acquire is granted when
	// the thief lets go.
	s.waitWaiters(t, 1)
	if err := c.Release(ctx, "again", "thief", 2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, patience, "re-election", func() bool { return e.rec.has("elected 3") })
	if got := e.rec.get(); !slices.Equal(got, []string{"elected 1", "lost 1", "elected 3"}) {
		t.Fatalf("events %v", got)
	}
}

func TestStepsDownByItsOwnDeadlineWhenTheServerIsPaused(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	// Its deadline (a renewal's send time plus 10 s) is told from a
	// step-down half a TTL late by more than a stall.
	ttl := 10 * time.Second
	e := start(t, c, "paused", "e", ttl)
	waitUntil(t, patience, "election", e.IsLeader)
	s.waitRenewals(t, 1) // its deadline is now a renewal's
	s.signal(syscall.SIGSTOP)
	defer s.signal(syscall.SIGCONT)
	stopped := time.Now()
	waitUntil(t, patience, "step-down", func() bool { return e.rec.has("lost 1") })
	if after := time.Since(stopped); after > ttl+ttl/2 {
		t.Fatalf("stepped down late: %v", after)
	}
	if e.IsLeader() {
		t.Fatal("still leader")
	}
	t0 := time.Now()
	e.stop()
	if d := time.Since(t0); d > ttl/2 {
		t.Fatalf("Run did not return promptly with the server paused: %v", d)
	}
}

func TestNewElectorChecksConfig(t *testing.T) {
	for _, cfg := range []leasehold.ElectorConfig{
		{Name: "n", TTL: time.Second},
		{Job: "j", TTL: time.Second},
		{Job: "j", Name: "n"},
		{Job: "j", Name: "n", TTL: -time.Second},
	} {
		if _, err := leasehold.NewElector(nil, cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}

// Two electors with one name for one job in one process are two holders:
// exactly one leads, the old leader's token is fenced after the hand-over,
// and the other takes over with a higher token when the leader stops.
func TestTwoElectorsWithOneNameInOneProcessAreTwoHolders(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	ttl := 10 * time.Second
	a := start(t, c, "twin", "twin", ttl)
	b := start(t, c, "twin", "twin", ttl)
	if a.Holder() == b.Holder() {
		t.Fatalf("one holder for two electors: %s", a.Holder())
	}
	if !strings.HasPrefix(a.Holder(), "twin@") || !strings.HasPrefix(b.Holder(), "twin@") {
		t.Fatalf("holders %s, %s", a.Holder(), b.Holder())
	}
	waitUntil(t, patience, "a leader", func() bool { return a.IsLeader() || b.IsLeader() })
	leader, follower := a, b
	if b.IsLeader() {
		leader, follower = b, a
	}
	s.waitWaiters(t, 1) // the follower is queued behind the leader
	for range 10 {
		if tok, ok := leader.Token(); !ok || tok != 1 {
			t.Fatalf("leader token %d %v", tok, ok)
		}
		if follower.IsLeader() {
			t.Fatal("both lead")
		}
		time.Sleep(30 * time.Millisecond)
	}
	if l, _ := c.GetLease(ctx, "twin"); l.Holder != leader.Holder() {
		t.Fatalf("server says %+v", l)
	}
	if _, err := c.CheckedWrite(ctx, "twin", 1, []byte("k"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	leader.stop()
	waitUntil(t, patience, "the hand-over", func() bool { return follower.IsLeader() })
	tok, _ := follower.Token()
	if tok <= 1 {
		t.Fatalf("follower token %d", tok)
	}
	_, err := c.CheckedWrite(ctx, "twin", 1, []byte("k"), []byte("old"))
	var fenced *leasehold.FencedError
	if !errors.As(err, &fenced) || fenced.CurrentToken != tok {
		t.Fatalf("the old leader's write: %v", err)
	}
	if _, err := c.CheckedWrite(ctx, "twin", tok, []byte("k"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.GetLease(ctx, "twin"); l.Holder != follower.Holder() {
		t.Fatalf("server says %+v", l)
	}
}

// A campaign the server refuses with INVALID_ARGUMENT (a TTL over
// --max-ttl, a job over --max-name-bytes) is not retried: Run returns it.
func TestRunReturnsAnErrorRetryingCannotFix(t *testing.T) {
	s := startServer(t, "--max-ttl", "10s", "--max-name-bytes", "64")
	c := dial(t, s)
	for _, tc := range []struct {
		job, field string
		ttl        time.Duration
	}{
		{"long-ttl", "ttl", 20 * time.Second},
		{strings.Repeat("j", 65), "job", time.Second},
	} {
		e, err := leasehold.NewElector(c, leasehold.ElectorConfig{Job: tc.job, Name: "n", TTL: tc.ttl, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.Run(ctxT(t)) }()
		select {
		case err := <-done:
			var ia *leasehold.InvalidArgumentError
			if !errors.Is(err, leasehold.ErrInvalidArgument) || !errors.As(err, &ia) || ia.Field != tc.field {
				t.Fatalf("Run returned %v", err)
			}
		case <-time.After(patience):
			t.Fatalf("Run did not return for %s", tc.field)
		}
		if e.IsLeader() {
			t.Fatal("leads")
		}
	}
}
