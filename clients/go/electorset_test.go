package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// The ElectorSet: many jobs, one holder, every lease renewed over one
// KeepAlive stream; against a real server.

// The server's counts of Renew calls and of KeepAlive streams answered.
const (
	renewCalls      = `leasehold_rpc_duration_seconds_count{method="Renew"}`
	keepAliveCalls  = `leasehold_rpc_duration_seconds_count{method="KeepAlive"}`
	renewalsCounted = "leasehold_renewals_total"
)

// timeline records the set's callbacks in order, with when they came.
type timeline struct {
	mu     sync.Mutex
	events []string
	at     map[string]time.Time
}

func (l *timeline) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, s)
	if l.at == nil {
		l.at = map[string]time.Time{}
	}
	l.at[s] = time.Now()
}

func (l *timeline) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func (l *timeline) when(s string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.at[s]
	return at, ok
}

func (l *timeline) has(s string) bool { _, ok := l.when(s); return ok }

// of is the events of job, in order.
func (l *timeline) of(job string) []string {
	var out []string
	for _, e := range l.get() {
		if strings.Contains(e, " "+job+" ") {
			out = append(out, e)
		}
	}
	return out
}

// runningSet is an ElectorSet whose Run runs in its own goroutine.
type runningSet struct {
	*leasehold.ElectorSet
	log    *timeline
	cancel context.CancelFunc
	done   chan error
}

func startSet(t *testing.T, c *leasehold.Client, name string, ttl time.Duration, jobs ...string) *runningSet {
	t.Helper()
	log := &timeline{}
	set, err := leasehold.NewElectorSet(c, leasehold.ElectorSetConfig{
		Name: name, TTL: ttl, Logger: quiet,
		Callbacks: leasehold.ElectorSetCallbacks{
			OnStartedLeading: func(ctx context.Context, job string, token uint64) {
				log.add(fmt.Sprintf("elected %s %d", job, token))
			},
			OnStoppedLeading: func(job string, token uint64) { log.add(fmt.Sprintf("lost %s %d", job, token)) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range jobs {
		if err := set.Campaign(job); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningSet{ElectorSet: set, log: log, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- set.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run's ctx and waits for it to return (nil).
func (r *runningSet) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if !ok {
			return // stopped before
		}
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
		close(r.done)
	case <-time.After(patience):
		t.Fatal("Run did not return")
	}
}

func (r *runningSet) leads(job string, token uint64) bool {
	got, ok := r.Token(job)
	return ok && got == token
}

func jobNames(prefix string, n int) []string {
	base := uniqueJob(prefix)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", base, i)
	}
	return out
}

// One set leads N jobs and keeps them over several TTLs, every renewal
// going over one KeepAlive stream (no Renew call); Run's end releases them
// all.
func TestElectorSetLeadsManyJobsOverOneKeepAliveStream(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	jobs := jobNames("fleet", 5)
	// Renewals every 1.5 s of 4.5 s leases: a stall between two of them
	// does not end one.
	ttl := 4500 * time.Millisecond
	set := startSet(t, c, "fleet", ttl, jobs...)
	waitUntil(t, patience, "every job led", func() bool { return len(set.Leading()) == len(jobs) })
	since := time.Now()
	waitUntil(t, 4*patience, "three TTLs of renewals", func() bool {
		if got := set.log.get(); len(got) != len(jobs) {
			t.Fatalf("events %v", got)
		}
		return time.Since(since) > 3*ttl && s.metric(t, renewalsCounted) >= float64(6*len(jobs))
	})
	for _, job := range jobs {
		if !set.leads(job, 1) {
			t.Fatalf("%s: not led with token 1: %v", job, set.Leading())
		}
		if l, err := c.GetLease(ctx, job); err != nil || l.Holder != set.Holder() || l.Token != 1 {
			t.Fatalf("server says %+v %v", l, err)
		}
	}
	if n := s.metric(t, renewCalls); n != 0 {
		t.Fatalf("%v unary Renew calls", n)
	}
	if n := s.metric(t, keepAliveCalls); n != 1 {
		t.Fatalf("%v KeepAlive streams, want one", n)
	}

	set.stop(t)
	for _, job := range jobs {
		if got := set.log.of(job); !slices.Equal(got, []string{"elected " + job + " 1", "lost " + job + " 1"}) {
			t.Fatalf("%s: events %v", job, got)
		}
		if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" || l.Token != 1 {
			t.Fatalf("not released: %+v %v", l, err)
		}
	}
	if len(set.Leading()) != 0 {
		t.Fatalf("still leading %v", set.Leading())
	}
}

// A job whose lease the chaos API expires steps down alone (its renewal
// is LEASE_LOST) and is campaigned for again; the others keep their
// leases.
func TestElectorSetStepsDownAChaosExpiredJobAloneAndCampaignsAgain(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx := dial(t, s), ctxT(t)
	jobs := jobNames("fleet-chaos", 3)
	set := startSet(t, c, "fleet", chaosTTL, jobs...)
	waitUntil(t, patience, "every job led", func() bool { return len(set.Leading()) == len(jobs) })

	expired := time.Now()
	if _, err := c.Chaos().Expire(ctx, jobs[1]); err != nil {
		t.Fatal(err)
	}
	lost := fmt.Sprintf("lost %s 1", jobs[1])
	waitUntil(t, patience, "the step-down", func() bool { return set.log.has(lost) })
	at, _ := set.log.when(lost)
	// By the renewal (every TTL/3), not by its deadline.
	if d := at.Sub(expired); d >= 2*chaosTTL/3 {
		t.Fatalf("stepped down %v after the expiry", d)
	}
	waitUntil(t, patience, "the job led again", func() bool { return set.leads(jobs[1], 2) })
	if got := set.log.of(jobs[1]); !slices.Equal(got, []string{"elected " + jobs[1] + " 1", lost, "elected " + jobs[1] + " 2"}) {
		t.Fatalf("events %v", got)
	}
	if n := s.metric(t, "leasehold_renew_losses_total"); n < 1 {
		t.Fatalf("no renewal was refused (renew losses %v)", n)
	}
	for _, job := range []string{jobs[0], jobs[2]} {
		if !set.leads(job, 1) || len(set.log.of(job)) != 1 {
			t.Fatalf("%s: %v %v", job, set.Leading(), set.log.of(job))
		}
	}
}

// With the server frozen (SIGSTOP), each job steps down by its own
// deadline: the send time of its last successful grant or renewal, plus
// the TTL. A job granted after the last renewal of the other steps down
// that much later.
func TestElectorSetStepsDownEachJobByItsOwnDeadline(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	// Renewals every 3 s: job b is granted one second after a renewal of
	// job a, and the server is frozen before the next renewal (two
	// seconds of margin for a stall).
	ttl := 9 * time.Second
	for attempt := 1; ; attempt++ {
		jobs := jobNames("fleet-freeze", 2)
		a, b := jobs[0], jobs[1]
		set := startSet(t, c, "fleet", ttl, a)
		waitUntil(t, patience, "a led", func() bool { return set.leads(a, 1) })
		first := set.Leading()[0].Deadline
		waitUntil(t, patience, "a renewed", func() bool {
			l := set.Leading()
			return len(l) == 1 && l[0].Deadline.After(first)
		})
		time.Sleep(time.Second) // b's grant, a second after a's renewal
		if err := set.Campaign(b); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, patience, "b led", func() bool { return set.leads(b, 1) })
		s.signal(syscall.SIGSTOP)
		time.Sleep(200 * time.Millisecond) // an answer already on its way is read
		leading := set.Leading()
		if len(leading) != 2 || leading[1].Deadline.Sub(leading[0].Deadline) < 500*time.Millisecond {
			// A stall let a renewal of both in before the freeze.
			s.signal(syscall.SIGCONT)
			set.stop(t)
			if attempt == 3 {
				t.Fatalf("a renewal of both came before the freeze, three times: %+v", leading)
			}
			t.Logf("attempt %d: a renewal of both came before the freeze; again", attempt)
			continue
		}
		da, db := leading[0].Deadline, leading[1].Deadline
		lostA, lostB := fmt.Sprintf("lost %s 1", a), fmt.Sprintf("lost %s 1", b)
		waitUntil(t, 2*patience, "both step down", func() bool { return set.log.has(lostA) && set.log.has(lostB) })
		atA, _ := set.log.when(lostA)
		atB, _ := set.log.when(lostB)
		t.Logf("deadlines %v apart; stepped down %v and %v after them", db.Sub(da),
			atA.Sub(da).Round(time.Millisecond), atB.Sub(db).Round(time.Millisecond))
		// Never before its deadline (the server may still count it ours),
		// and not long after.
		if atA.Before(da) || atA.Sub(da) > ttl/3 {
			t.Fatalf("a stepped down at %v, its deadline %v", atA, da)
		}
		if atB.Before(db) || atB.Sub(db) > ttl/3 {
			t.Fatalf("b stepped down at %v, its deadline %v", atB, db)
		}
		if set.IsLeading(a) || set.IsLeading(b) {
			t.Fatalf("still leading %v", set.Leading())
		}
		t0 := time.Now()
		set.stop(t)
		if d := time.Since(t0); d > ttl/2 {
			t.Fatalf("Run did not return promptly with the server frozen: %v", d)
		}
		s.signal(syscall.SIGCONT)
		return
	}
}

// Two sets campaign for the same jobs: each job has one leader; Resign of
// a job hands it over at once, and the end of the leader's Run hands
// over every other.
func TestTwoElectorSetsLeadEachJobOnceAndResignHandsOver(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	jobs := jobNames("fleet-two", 4)
	// A hand-over by release is told from one by expiry by a bound of a
	// third of the TTL, longer than a stall.
	ttl := 30 * time.Second
	first := startSet(t, c, "fleet", ttl, jobs...)
	waitUntil(t, patience, "every job led", func() bool { return len(first.Leading()) == len(jobs) })
	second := startSet(t, c, "fleet", ttl, jobs...)
	if first.Holder() == second.Holder() {
		t.Fatalf("one holder for two sets: %s", first.Holder())
	}
	s.waitWaiters(t, float64(len(jobs)))
	if got := second.log.get(); len(got) != 0 || len(second.Leading()) != 0 {
		t.Fatalf("the second set leads too: %v", got)
	}

	t0 := time.Now()
	first.Resign(jobs[0])
	waitUntil(t, patience, "jobs[0] handed over", func() bool { return second.leads(jobs[0], 2) })
	if d := time.Since(t0); d > ttl/3 {
		t.Fatalf("handed over by expiry, not the release: %v", d)
	}
	if _, ok := first.Token(jobs[0]); ok || !first.log.has(fmt.Sprintf("lost %s 1", jobs[0])) {
		t.Fatalf("the first set still leads %s: %v", jobs[0], first.log.get())
	}
	for _, job := range jobs[1:] {
		if !first.leads(job, 1) {
			t.Fatalf("the first set lost %s: %v", job, first.Leading())
		}
	}

	t0 = time.Now()
	first.stop(t)
	waitUntil(t, patience, "every job handed over", func() bool { return len(second.Leading()) == len(jobs) })
	if d := time.Since(t0); d > ttl/3 {
		t.Fatalf("handed over by expiry, not the release: %v", d)
	}
	for _, job := range jobs {
		if l, err := c.GetLease(ctx, job); err != nil || l.Holder != second.Holder() || l.Token != 2 {
			t.Fatalf("server says %+v %v", l, err)
		}
	}
	second.stop(t)
	for _, job := range jobs {
		if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" {
			t.Fatalf("not released: %+v %v", l, err)
		}
	}
}

// A campaign the server refuses with an error retrying cannot fix stops
// that job alone, and Err has the error.
func TestElectorSetStopsAJobTheServerRefuses(t *testing.T) {
	s := startServer(t, "--max-name-bytes", "64")
	c := dial(t, s)
	good, bad := uniqueJob("fleet-ok"), strings.Repeat("j", 65)
	set := startSet(t, c, "fleet", 10*time.Second, good, bad)
	var ia *leasehold.InvalidArgumentError
	waitUntil(t, patience, "the refusal", func() bool { return errors.As(set.Err(bad), &ia) })
	if ia.Field != "job" {
		t.Fatalf("field %q", ia.Field)
	}
	waitUntil(t, patience, "the other job led", func() bool { return set.leads(good, 1) })
	if set.Err(good) != nil || set.IsLeading(bad) {
		t.Fatalf("good: %v; bad leading %v", set.Err(good), set.IsLeading(bad))
	}
}

func TestElectorSetChecksItsConfigAndUse(t *testing.T) {
	for _, cfg := range []leasehold.ElectorSetConfig{
		{TTL: time.Second},
		{Name: "n"},
		{Name: "n", TTL: -time.Second},
	} {
		if _, err := leasehold.NewElectorSet(nil, cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
	s := startServer(t)
	set, err := leasehold.NewElectorSet(dial(t, s), leasehold.ElectorSetConfig{Name: "n", TTL: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Campaign(""); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Fatalf("an empty job: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := set.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := set.Run(context.Background()); !errors.Is(err, leasehold.ErrSetStopped) {
		t.Fatalf("a second Run: %v", err)
	}
	if err := set.Campaign("j"); !errors.Is(err, leasehold.ErrSetStopped) {
		t.Fatalf("Campaign after Run: %v", err)
	}
}

// A broken stream is opened again: the server is killed and restarted on
// the same port and data dir, well within the TTL, and the set goes on
// renewing both leases over a new stream, leading throughout.
func TestElectorSetOpensABrokenStreamAgain(t *testing.T) {
	s := startServer(t)
	c := dial(t, s)
	jobs := jobNames("fleet-reopen", 2)
	ttl := 15 * time.Second
	set := startSet(t, c, "fleet", ttl, jobs...)
	waitUntil(t, patience, "every job led", func() bool { return len(set.Leading()) == len(jobs) })
	s.waitRenewals(t, float64(len(jobs))) // the first stream works
	s.kill()
	s = s.restart(t)
	waitUntil(t, 2*patience, "renewals on a new stream", func() bool {
		return s.metric(t, renewalsCounted) >= float64(len(jobs)) && s.metric(t, keepAliveCalls) >= 1
	})
	for _, job := range jobs {
		if !set.leads(job, 1) {
			t.Fatalf("%s: %v (events %v)", job, set.Leading(), set.log.get())
		}
	}
	if got := set.log.get(); len(got) != len(jobs) {
		t.Fatalf("events %v", got)
	}
	if n := s.metric(t, renewCalls); n != 0 {
		t.Fatalf("%v unary Renew calls", n)
	}
}
