package leasehold_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// observed collects what an observation of a job delivers, in order.
type observed struct {
	mu      sync.Mutex
	changes []leasehold.LeaseChange
}

// observeJob observes job until the test ends.
func observeJob(t *testing.T, c *leasehold.Client, job string) *observed {
	t.Helper()
	o := &observed{}
	ctx, cancel := context.WithCancel(context.Background())
	changes, wait := c.Observe(ctx, job)
	go func() {
		for ch := range changes {
			o.mu.Lock()
			o.changes = append(o.changes, ch)
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); _ = wait() })
	return o
}

// has reports whether a change of kind, with holder, token and value, was
// observed.
func (o *observed) has(kind leasehold.EventKind, holder string, token uint64, value string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.ContainsFunc(o.changes, func(ch leasehold.LeaseChange) bool {
		return ch.Kind == kind && ch.Lease.Holder == holder && ch.Lease.Token == token && string(ch.Lease.Value) == value
	})
}

func (o *observed) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var s []string
	for _, ch := range o.changes {
		s = append(s, fmt.Sprintf("%v %s %d %q", ch.Kind, ch.Lease.Holder, ch.Lease.Token, ch.Lease.Value))
	}
	return fmt.Sprint(s)
}

// startPublishing runs an Elector publishing value, whose OnNewLeader
// records "leader <holder> <token> <value>".
func startPublishing(t *testing.T, c *leasehold.Client, job, name, value string, ttl time.Duration) *running {
	t.Helper()
	rec := &recorder{}
	cb := rec.callbacks()
	cb.OnNewLeader = func(holder string, token uint64, value []byte) {
		rec.add(fmt.Sprintf("leader %s %d %s", holder, token, value))
	}
	e, err := leasehold.NewElector(c, leasehold.ElectorConfig{Job: job, Name: name, TTL: ttl, Value: []byte(value),
		Callbacks: cb, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Elector: e, cancel: cancel, done: make(chan struct{}), rec: rec}
	go func() { _ = e.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

// leaderIs polls r.Leader until it says holder, token and value.
func leaderIs(t *testing.T, r *running, holder string, token uint64, value string) {
	t.Helper()
	ctx := ctxT(t)
	waitUntil(t, patience, fmt.Sprintf("Leader() = %s %d %q", holder, token, value), func() bool {
		l, err := r.Leader(ctx)
		return err == nil && l.Holder == holder && l.Token == token && string(l.Value) == value
	})
}

// The unary calls: Acquire publishes a value, Renew keeps it without
// RenewValue and replaces or clears it with one, a repeated Acquire of
// the live holder replaces it, and GetLease, ListLeases, a KeepAlive
// renewal and the history's tenure agree.
func TestAcquireAndRenewPublishTheValue(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("value-unary")
	ttl := 30 * time.Second
	value := func(want string) {
		t.Helper()
		l, err := c.GetLease(ctx, job)
		if err != nil || string(l.Value) != want || l.Holder != "a" {
			t.Fatalf("GetLease: %+v %v, want value %q", l, err, want)
		}
	}
	a, err := c.Acquire(ctx, job, "a", ttl, 0, leasehold.AcquireValue([]byte("10.0.0.1:8080")))
	if err != nil || !a.Acquired || string(a.Lease.Value) != "10.0.0.1:8080" {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	value("10.0.0.1:8080")
	// Someone else's Acquire is told the holder's value.
	if b, err := c.Acquire(ctx, job, "b", ttl, 0, leasehold.AcquireValue([]byte("b"))); err != nil || b.Acquired ||
		string(b.Lease.Value) != "10.0.0.1:8080" {
		t.Fatalf("busy: %+v %v", b, err)
	}
	if l, err := c.Renew(ctx, job, "a", 1, ttl); err != nil || string(l.Value) != "10.0.0.1:8080" {
		t.Fatalf("renew without a value keeps it: %+v %v", l, err)
	}
	if r, err := c.RenewLease(ctx, job, "a", 1, ttl, leasehold.RenewValue([]byte("10.0.0.1:9090"))); err != nil ||
		string(r.Lease.Value) != "10.0.0.1:9090" {
		t.Fatalf("renew with a value replaces it: %+v %v", r, err)
	}
	value("10.0.0.1:9090")
	// A KeepAlive renewal keeps it.
	ka, err := c.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ka.Renew(ctx, []leasehold.KeepAliveRenewal{{Job: job, Holder: "a", Token: 1, TTL: ttl}})
	if err != nil || res[0].Kind != leasehold.KeepAliveRenewed {
		t.Fatalf("keep-alive: %+v %v", res, err)
	}
	_ = ka.Close()
	value("10.0.0.1:9090")
	if ls, err := c.ListLeases(ctx, job); err != nil || len(ls) != 1 || string(ls[0].Value) != "10.0.0.1:9090" {
		t.Fatalf("list: %+v %v", ls, err)
	}
	// An empty RenewValue clears it (nil too: the field is set).
	if l, err := c.Renew(ctx, job, "a", 1, ttl, leasehold.RenewValue(nil)); err != nil || len(l.Value) != 0 {
		t.Fatalf("renew with an empty value clears it: %+v %v", l, err)
	}
	value("")
	// The live holder's repeated Acquire replaces it, same token.
	if a, err := c.Acquire(ctx, job, "a", ttl, 0, leasehold.AcquireValue([]byte("again"))); err != nil || !a.Acquired ||
		a.Lease.Token != 1 || string(a.Lease.Value) != "again" {
		t.Fatalf("repeated acquire: %+v %v", a, err)
	}
	value("again")
	if err := c.Release(ctx, job, "a", 1); err != nil {
		t.Fatal(err)
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" || len(l.Value) != 0 {
		t.Fatalf("a free job has no value: %+v %v", l, err)
	}
	// The history keeps the value each grant was made with.
	if a, err := c.Acquire(ctx, job, "b", ttl, 0, leasehold.AcquireValue([]byte("b-addr"))); err != nil || a.Lease.Token != 2 {
		t.Fatalf("b: %+v %v", a, err)
	}
	page, err := c.History(ctx, job, leasehold.HistoryOptions{})
	if err != nil || len(page.Tenures) != 2 {
		t.Fatalf("history: %+v %v", page, err)
	}
	if got := page.Tenures[0]; got.Token != 2 || string(got.Value) != "b-addr" {
		t.Fatalf("tenure 2: %+v", got)
	}
	if got := page.Tenures[1]; got.Token != 1 || string(got.Value) != "10.0.0.1:8080" {
		t.Fatalf("tenure 1 (granted with the first value): %+v", got)
	}
}

// An elector's value is seen by another elector's Leader() and
// OnNewLeader, by an observation (a VALUE_CHANGED change after SetValue,
// no new leader reported for it), and in the history's tenure; a value
// SetValue gave is sent until a renewal carried it, then not again.
func TestAnElectorsValueIsSeenByLeaderObserveOnNewLeaderAndHistory(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("value-elector")
	ttl := 3 * time.Second
	obs := observeJob(t, c, job)
	a := startPublishing(t, c, job, "a", "10.0.0.1:8080", ttl)
	waitUntil(t, patience, "a leads", a.IsLeader)
	b := startPublishing(t, c, job, "b", "10.0.0.2:8080", ttl)
	s.waitWaiters(t, 1)

	// The follower's Leader() and OnNewLeader name the leader and its value.
	leaderIs(t, b, a.Holder(), 1, "10.0.0.1:8080")
	first := fmt.Sprintf("leader %s 1 10.0.0.1:8080", a.Holder())
	waitUntil(t, patience, "b told of a", func() bool { return len(b.leaders()) >= 1 })
	if got := b.leaders(); !slices.Equal(got, []string{first}) {
		t.Fatalf("b's OnNewLeader: %v", got)
	}
	waitUntil(t, patience, "a grant with the value observed", func() bool {
		return obs.has(leasehold.EventCurrent, a.Holder(), 1, "10.0.0.1:8080") ||
			obs.has(leasehold.EventAcquired, a.Holder(), 1, "10.0.0.1:8080")
	})

	// SetValue: the next renewal carries it; watchers see VALUE_CHANGED.
	if err := a.SetValue([]byte("10.0.0.1:9090")); err != nil {
		t.Fatal(err)
	}
	leaderIs(t, b, a.Holder(), 1, "10.0.0.1:9090")
	waitUntil(t, patience, "VALUE_CHANGED observed", func() bool {
		return obs.has(leasehold.EventValueChanged, a.Holder(), 1, "10.0.0.1:9090")
	})
	if tok, ok := a.Token(); !ok || tok != 1 {
		t.Fatalf("a value change is no new grant: %d %v", tok, ok)
	}

	// Once carried, it is not sent again: a value set behind the elector's
	// back (a Renew of its own lease) survives its next renewals.
	if _, err := c.Renew(ctx, job, a.Holder(), 1, ttl, leasehold.RenewValue([]byte("set-aside"))); err != nil {
		t.Fatal(err)
	}
	s.waitRenewalsMore(t, 3) // over a TTL of a's renewals
	if l, err := c.GetLease(ctx, job); err != nil || string(l.Value) != "set-aside" || l.Token != 1 {
		t.Fatalf("the elector sent its value again: %+v %v", l, err)
	}

	// The hand-over: b leads with its own value; OnNewLeader, Leader() and
	// the observation say so.
	a.stop()
	waitUntil(t, patience, "b leads", b.IsLeader)
	second := fmt.Sprintf("leader %s 2 10.0.0.2:8080", b.Holder())
	waitUntil(t, patience, "b told of its own lead", func() bool { return len(b.leaders()) >= 2 })
	// The value change under token 1 was no new leader.
	if got := b.leaders(); !slices.Equal(got, []string{first, second}) {
		t.Fatalf("b's OnNewLeader: %v", got)
	}
	leaderIs(t, b, b.Holder(), 2, "10.0.0.2:8080")
	waitUntil(t, patience, "b's grant observed", func() bool {
		return obs.has(leasehold.EventAcquired, b.Holder(), 2, "10.0.0.2:8080")
	})

	// SetValue of a leader that already sent it: cleared with an empty one.
	if err := b.SetValue(nil); err != nil {
		t.Fatal(err)
	}
	leaderIs(t, b, b.Holder(), 2, "")
	waitUntil(t, patience, "the cleared value observed", func() bool {
		return obs.has(leasehold.EventValueChanged, b.Holder(), 2, "")
	})

	// The history: each tenure with the value its grant was made with.
	page, err := c.History(ctx, job, leasehold.HistoryOptions{})
	if err != nil || len(page.Tenures) != 2 {
		t.Fatalf("history: %+v %v", page, err)
	}
	if got := page.Tenures[0]; got.Token != 2 || got.Holder != b.Holder() || string(got.Value) != "10.0.0.2:8080" {
		t.Fatalf("tenure 2: %+v", got)
	}
	if got := page.Tenures[1]; got.Token != 1 || got.Holder != a.Holder() || string(got.Value) != "10.0.0.1:8080" {
		t.Fatalf("tenure 1: %+v", got)
	}
	t.Logf("observed: %v", obs)
}

// A value SetValue gives while the elector does not lead goes with its
// next grant (its next Acquire, or the first renewal after the grant of
// an Acquire already waiting): the leader publishes it, not the old one.
func TestSetValueOfAFollowerIsPublishedWhenItLeads(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("value-follower")
	ttl := 3 * time.Second
	if a, err := c.Acquire(ctx, job, "x", 60*time.Second, 0); err != nil || !a.Acquired {
		t.Fatalf("x: %+v %v", a, err)
	}
	e := startPublishing(t, c, job, "e", "old", ttl)
	s.waitWaiters(t, 1)
	if err := e.SetValue([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, job, "x", 1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, patience, "e leads", e.IsLeader)
	leaderIs(t, e, e.Holder(), 2, "new")
}

// A value over 1024 bytes is the typed invalid-argument error naming
// "value", and nothing changes: not by Acquire, Renew, NewElector or
// SetValue. 1024 bytes are accepted.
func TestAValueOver1024BytesIsInvalidAndChangesNothing(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("value-limit")
	ttl := 30 * time.Second
	tooLong := bytes.Repeat([]byte("v"), leasehold.MaxValueBytes+1)
	isValueError := func(what string, err error) {
		t.Helper()
		var ia *leasehold.InvalidArgumentError
		if !errors.As(err, &ia) || ia.Field != "value" || !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Fatalf("%s: %T %v, want an *InvalidArgumentError naming value", what, err, err)
		}
	}

	_, err := c.Acquire(ctx, job, "a", ttl, 0, leasehold.AcquireValue(tooLong))
	isValueError("acquire", err)
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" || l.Token != 0 {
		t.Fatalf("granted anyway: %+v %v", l, err)
	}
	limit := bytes.Repeat([]byte("k"), leasehold.MaxValueBytes)
	if a, err := c.Acquire(ctx, job, "a", ttl, 0, leasehold.AcquireValue(limit)); err != nil || !bytes.Equal(a.Lease.Value, limit) {
		t.Fatalf("1024 bytes: %+v %v", a, err)
	}
	_, err = c.Renew(ctx, job, "a", 1, ttl, leasehold.RenewValue(tooLong))
	isValueError("renew", err)
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "a" || !bytes.Equal(l.Value, limit) {
		t.Fatalf("changed anyway: %+v %v", l, err)
	}
	if err := c.Release(ctx, job, "a", 1); err != nil {
		t.Fatal(err)
	}

	_, err = leasehold.NewElector(c, leasehold.ElectorConfig{Job: job, Name: "e", TTL: ttl, Value: tooLong})
	isValueError("NewElector", err)
	e := startPublishing(t, c, job, "e", "fine", 3*time.Second)
	waitUntil(t, patience, "e leads", e.IsLeader)
	isValueError("SetValue", e.SetValue(tooLong))
	s.waitRenewalsMore(t, 2)
	leaderIs(t, e, e.Holder(), 2, "fine")
	if !e.IsLeader() || e.rec.has("lost 2") {
		t.Fatalf("a refused value cost the lead: %v", e.rec.get())
	}
}
