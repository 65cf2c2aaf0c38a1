package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// Counted leases (semaphores): AcquireSlots, ElectorConfig.Slots,
// LockSlots, against a real server. Slot k of job J is a job of its own,
// "J#k", with its own token.

// startCounted starts an Elector for one of slots slots of job's counted
// lease; its recorder notes "elected <token> <job of the lease>" (the
// job from the leader context, LeaseJobFrom) and "lost <token>".
func startCounted(t *testing.T, c *leasehold.Client, job, name string, ttl time.Duration, slots uint32) *running {
	t.Helper()
	rec := &recorder{}
	e, err := leasehold.NewElector(c, leasehold.ElectorConfig{
		Job: job, Name: name, TTL: ttl, Slots: slots, Logger: quiet,
		Callbacks: leasehold.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, token uint64) {
				leaseJob, _ := leasehold.LeaseJobFrom(ctx)
				rec.add(fmt.Sprintf("elected %d %s", token, leaseJob))
			},
			OnStoppedLeading: func(token uint64) { rec.add(fmt.Sprintf("lost %d", token)) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Elector: e, cancel: cancel, done: make(chan struct{}), rec: rec}
	go func() { e.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

// leading is what an elector says it leads with: its token, the job of
// its lease and its slot; fatal when it does not lead.
func leading(t *testing.T, e *running) (uint64, string, uint32) {
	t.Helper()
	token, ok := e.Token()
	leaseJob, jobOK := e.LeaseJob()
	slot, slotOK := e.Slot()
	if !ok || !jobOK || !slotOK {
		t.Fatalf("%s does not lead: token %v, lease job %v, slot %v", e.Holder(), ok, jobOK, slotOK)
	}
	return token, leaseJob, slot
}

// (a) Three electors with Slots 2 on one job: two lead at once, in
// different slots (J#0 and J#1, each with its own token), the third
// waits, holding the line's turn (the job's own lease). The first leader
// resigns: the third leads in the freed slot, with that slot's token + 1,
// at the release (not by expiry). The resigned leader's write on its slot
// job with its old token is the typed Fenced error; the live slot
// holders' writes on their slot jobs pass.
func TestCountedElectorsLeadInTheirOwnSlotsAndAFreedSlotGoesToTheWaiter(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("slots-elector")
	// The hand-over by the release is told from one by expiry by a bound
	// of a third of the TTL, longer than a stall.
	ttl := 30 * time.Second
	all := []*running{
		startCounted(t, c, job, "a", ttl, 2),
		startCounted(t, c, job, "b", ttl, 2),
		startCounted(t, c, job, "c", ttl, 2),
	}
	var leaders []*running
	var waiter *running
	waitUntil(t, patience, "two leaders", func() bool {
		leaders, waiter = nil, nil
		for _, e := range all {
			if e.IsLeader() {
				leaders = append(leaders, e)
			} else {
				waiter = e
			}
		}
		return len(leaders) == 2
	})
	// The third is queued: the server holds the job's own lease, the
	// line's turn, for the first waiter.
	waitUntil(t, patience, "the waiter's turn", func() bool {
		l, err := c.GetLease(ctx, job)
		return err == nil && l.Holder == waiter.Holder()
	})
	if waiter.IsLeader() {
		t.Fatal("three lead a job of two slots")
	}
	if j, ok := waiter.LeaseJob(); ok || j != "" {
		t.Fatalf("the waiter's LeaseJob: %q %v", j, ok)
	}
	if k, ok := waiter.Slot(); ok || k != 0 {
		t.Fatalf("the waiter's Slot: %d %v", k, ok)
	}

	var slotJobs []string
	for _, e := range leaders {
		token, leaseJob, slot := leading(t, e)
		if token != 1 || leaseJob != fmt.Sprintf("%s#%d", job, slot) {
			t.Fatalf("%s leads with token %d on %q in slot %d", e.Holder(), token, leaseJob, slot)
		}
		slotJobs = append(slotJobs, leaseJob)
		if got := e.rec.get(); !slices.Equal(got, []string{fmt.Sprintf("elected 1 %s", leaseJob)}) {
			t.Fatalf("%s's callbacks %v", e.Holder(), got)
		}
		l, err := c.GetLease(ctx, leaseJob)
		if err != nil || l.Holder != e.Holder() || l.Token != token {
			t.Fatalf("the server says %+v %v about %s", l, err, leaseJob)
		}
		if v, err := c.CheckedWrite(ctx, leaseJob, token, []byte("status"), []byte(e.Holder())); err != nil || v != 1 {
			t.Fatalf("%s's write on its slot job: version %d, %v", e.Holder(), v, err)
		}
	}
	slices.Sort(slotJobs)
	if want := []string{job + "#0", job + "#1"}; !slices.Equal(slotJobs, want) {
		t.Fatalf("the leaders' slot jobs %v, want %v", slotJobs, want)
	}

	first, second := leaders[0], leaders[1]
	firstToken, firstJob, firstSlot := leading(t, first)
	t0 := time.Now()
	first.stop() // Run's ctx is done: it releases its slot's job
	waitUntil(t, patience, "the waiter leads", func() bool { return waiter.IsLeader() })
	if d := time.Since(t0); d > ttl/3 {
		t.Fatalf("the freed slot went over by expiry, not the release: %v", d)
	}
	token, leaseJob, slot := leading(t, waiter)
	if leaseJob != firstJob || slot != firstSlot || token != firstToken+1 {
		t.Fatalf("the waiter leads with token %d on %q slot %d; the freed slot was %q with token %d",
			token, leaseJob, slot, firstJob, firstToken)
	}
	if got := first.rec.get(); !slices.Equal(got, []string{fmt.Sprintf("elected 1 %s", firstJob), "lost 1"}) {
		t.Fatalf("the first leader's callbacks %v", got)
	}
	if j, ok := first.LeaseJob(); ok {
		t.Fatalf("the resigned leader still says it leads on %q", j)
	}
	if l, err := c.GetLease(ctx, firstJob); err != nil || l.Holder != waiter.Holder() || l.Token != token {
		t.Fatalf("the server says %+v %v about the freed slot", l, err)
	}

	_, err := c.CheckedWrite(ctx, firstJob, firstToken, []byte("status"), []byte("stale"))
	var fenced *leasehold.FencedError
	if !errors.As(err, &fenced) || !errors.Is(err, leasehold.ErrFenced) || fenced.CurrentToken != firstToken+1 {
		t.Fatalf("the resigned leader's write with its old token: %v", err)
	}
	if v, err := c.CheckedWrite(ctx, leaseJob, token, []byte("status"), []byte("new")); err != nil || v != 2 {
		t.Fatalf("the new holder's write on the freed slot: version %d, %v", v, err)
	}
	secondToken, secondJob, _ := leading(t, second)
	if v, err := c.CheckedWrite(ctx, secondJob, secondToken, []byte("status"), []byte("still")); err != nil || v != 2 {
		t.Fatalf("the other live holder's write on its slot job: version %d, %v", v, err)
	}
	if r, err := c.Read(ctx, firstJob, []byte("status")); err != nil || string(r.Value) != "new" || r.Token != token {
		t.Fatalf("the freed slot's store: %+v %v", r, err)
	}

	second.stop()
	waiter.stop()
	for _, j := range []string{job + "#0", job + "#1"} {
		if l, err := c.GetLease(ctx, j); err != nil || l.Holder != "" {
			t.Fatalf("%s not released: %+v %v", j, l, err)
		}
	}
}

// A counted elector renews its slot's job: over several TTLs it leads
// once, with one token, and the server's lease of the slot stays its own.
// (Renewals of the job itself would be refused: it would step down, and
// its next Acquire would report a second election.)
func TestCountedElectorRenewsItsSlotJob(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("slots-renew")
	ttl := 1500 * time.Millisecond
	e := startCounted(t, c, job, "a", ttl, 3)
	waitUntil(t, patience, "a leader", e.IsLeader)
	token, leaseJob, _ := leading(t, e)
	before := s.metric(t, "leasehold_renewals_total")
	s.waitRenewals(t, before+4)
	if got := e.rec.get(); !slices.Equal(got, []string{fmt.Sprintf("elected %d %s", token, leaseJob)}) {
		t.Fatalf("callbacks over several TTLs %v", got)
	}
	if l, err := c.GetLease(ctx, leaseJob); err != nil || l.Holder != e.Holder() || l.Token != token {
		t.Fatalf("the server says %+v %v about %s", l, err, leaseJob)
	}
	e.stop()
	if l, err := c.GetLease(ctx, leaseJob); err != nil || l.Holder != "" {
		t.Fatalf("%s not released: %+v %v", leaseJob, l, err)
	}
}

// (b) A unary Acquire with AcquireSlots: the grant is a slot's own job
// (Lease.Job "J#k", Lease.Slot k, Lease.Slots N), renewed and released by
// that name; a full job is busy; the live holder asking again is renewed
// in its slot. An Acquire naming another count for the job is the typed
// invalid-argument error with Field "slots", as is a count over 100, and
// neither changes anything.
func TestAcquireSlotsGrantsASlotJobAndAnotherCountIsInvalid(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("slots-acquire")
	ttl := 30 * time.Second
	acquire := func(holder string, slots uint32) leasehold.Acquired {
		t.Helper()
		a, err := c.Acquire(ctx, job, holder, ttl, 0, leasehold.AcquireSlots(slots))
		if err != nil {
			t.Fatalf("%s: %v", holder, err)
		}
		return a
	}
	a, b := acquire("a", 2), acquire("b", 2)
	for _, g := range []leasehold.Acquired{a, b} {
		l := g.Lease
		if !g.Acquired || !l.Counted() || l.Slots != 2 || l.Token != 1 || l.Job != fmt.Sprintf("%s#%d", job, l.Slot) {
			t.Fatalf("a slot's grant: %+v", g)
		}
	}
	if a.Lease.Slot == b.Lease.Slot {
		t.Fatalf("two holders in slot %d", a.Lease.Slot)
	}
	if busy := acquire("c", 2); busy.Acquired {
		t.Fatalf("a third holder of two slots: %+v", busy)
	}
	if again := acquire("a", 2); !again.Acquired || again.Lease.Job != a.Lease.Job || again.Lease.Token != a.Lease.Token {
		t.Fatalf("the live holder asking again, not renewed in its slot: %+v", again)
	}
	// An ordinary lease says nothing of slots.
	other := uniqueJob("slots-ordinary")
	if o, err := c.Acquire(ctx, other, "a", ttl, 0); err != nil || o.Lease.Counted() || o.Lease.Slot != 0 || o.Lease.Job != other {
		t.Fatalf("an ordinary grant: %+v %v", o, err)
	}

	invalid := func(job string, slots uint32) {
		t.Helper()
		_, err := c.Acquire(ctx, job, "d", ttl, 0, leasehold.AcquireSlots(slots))
		var ia *leasehold.InvalidArgumentError
		if !errors.As(err, &ia) || !errors.Is(err, leasehold.ErrInvalidArgument) || ia.Field != "slots" {
			t.Fatalf("%d slots of %s: want the invalid-argument error naming slots, got %v", slots, job, err)
		}
	}
	_, err := c.Acquire(ctx, job, "d", ttl, 0, leasehold.AcquireSlots(3))
	var ia *leasehold.InvalidArgumentError
	if !errors.As(err, &ia) || ia.Field != "slots" || !strings.Contains(ia.Message, "2") {
		t.Fatalf("another count: want the invalid-argument error naming slots and the job's count 2, got %v", err)
	}
	invalid(job, leasehold.MaxSlots+1)
	fresh := uniqueJob("slots-fresh")
	invalid(fresh, leasehold.MaxSlots+1)
	// Nothing changed: the slots are as they were, and the fresh job has
	// no count (3 is accepted).
	for _, g := range []leasehold.Acquired{a, b} {
		if l, err := c.GetLease(ctx, g.Lease.Job); err != nil || l.Holder != g.Lease.Holder || l.Token != 1 {
			t.Fatalf("%s after the refusals: %+v %v", g.Lease.Job, l, err)
		}
	}
	if f, err := c.Acquire(ctx, fresh, "d", ttl, 0, leasehold.AcquireSlots(3)); err != nil || !f.Acquired || f.Lease.Slots != 3 {
		t.Fatalf("the fresh job after a refused count: %+v %v", f, err)
	}

	// Renew and Release name the slot's job; the freed slot goes to the
	// next holder with its token + 1.
	if l, err := c.Renew(ctx, a.Lease.Job, "a", a.Lease.Token, ttl); err != nil || l.Token != a.Lease.Token {
		t.Fatalf("renew of the slot's job: %+v %v", l, err)
	}
	if err := c.Release(ctx, a.Lease.Job, "a", a.Lease.Token); err != nil {
		t.Fatal(err)
	}
	if g := acquire("c", 2); !g.Acquired || g.Lease.Job != a.Lease.Job || g.Lease.Token != a.Lease.Token+1 {
		t.Fatalf("the freed slot: %+v", g)
	}
}

// An elector whose count the server refuses (over 100, or not the job's)
// stops: Run returns the typed invalid-argument error naming slots. A
// counted elector with OnNewLeader is refused by NewElector.
func TestCountedElectorRefusedCountStopsRunWithTheTypedError(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("slots-refused")
	if a, err := c.Acquire(ctx, job, "a", 30*time.Second, 0, leasehold.AcquireSlots(2)); err != nil || !a.Acquired {
		t.Fatalf("%+v %v", a, err)
	}
	for _, slots := range []uint32{3, leasehold.MaxSlots + 1} {
		e, err := leasehold.NewElector(c, leasehold.ElectorConfig{Job: job, Name: "e", TTL: 10 * time.Second, Slots: slots, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(context.Background(), patience)
		err = e.Run(rctx)
		cancel()
		var ia *leasehold.InvalidArgumentError
		if !errors.As(err, &ia) || ia.Field != "slots" {
			t.Fatalf("Run of an elector with %d slots: %v", slots, err)
		}
	}
	_, err := leasehold.NewElector(c, leasehold.ElectorConfig{Job: job, Name: "e", TTL: time.Second, Slots: 2,
		Callbacks: leasehold.LeaderCallbacks{OnNewLeader: func(string, uint64, []byte) {}}})
	if err == nil {
		t.Fatal("NewElector took Slots with OnNewLeader")
	}
}

// A counted lock (LockSlots): two hold the job at once, each in its own
// slot's job with its own token, and write under it; a third waits, and
// is granted the slot the first frees, with its token + 1; the first's
// write with its old token is then fenced.
func TestCountedLockHoldsTwoAtOnceEachInItsSlot(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("slots-lock")
	type held struct {
		lock  *leasehold.Lock
		leave chan struct{}
	}
	entered := make(chan held, 3)
	lockSlot := func(name string) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- c.WithLock(context.Background(), job, 30*time.Second, func(ctx context.Context, lock *leasehold.Lock) error {
				h := held{lock, make(chan struct{})}
				entered <- h
				select {
				case <-h.leave:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, leasehold.LockSlots(2), leasehold.LockName(name), leasehold.LockLogger(quiet))
		}()
		return done
	}
	next := func() held {
		t.Helper()
		select {
		case h := <-entered:
			return h
		case <-time.After(2 * patience):
			t.Fatal("no lock entered")
			return held{}
		}
	}
	done := []<-chan error{lockSlot("one"), lockSlot("two")}
	first, second := next(), next()
	for _, h := range []held{first, second} {
		l := h.lock
		slot, ok := l.Slot()
		if !ok || l.Job() != job || l.LeaseJob() != fmt.Sprintf("%s#%d", job, slot) || l.Token() != 1 || !l.IsHeld() {
			t.Fatalf("a counted lock: %v, slot %d %v", l, slot, ok)
		}
		if v, err := c.CheckedWrite(ctx, l.LeaseJob(), l.Token(), []byte("status"), []byte(l.Holder())); err != nil || v != 1 {
			t.Fatalf("%v's write on its slot job: version %d, %v", l, v, err)
		}
	}
	if first.lock.LeaseJob() == second.lock.LeaseJob() {
		t.Fatalf("two locks in one slot: %v %v", first.lock, second.lock)
	}
	done = append(done, lockSlot("three"))
	waitUntil(t, patience, "the third lock's turn", func() bool {
		l, err := c.GetLease(ctx, job)
		return err == nil && strings.HasPrefix(l.Holder, "three@")
	})
	select {
	case h := <-entered:
		t.Fatalf("a third lock of two slots entered: %v", h.lock)
	default:
	}

	close(first.leave)
	third := next()
	if third.lock.LeaseJob() != first.lock.LeaseJob() || third.lock.Token() != first.lock.Token()+1 {
		t.Fatalf("the third lock %v; the freed slot was %v", third.lock, first.lock)
	}
	_, err := c.CheckedWrite(ctx, first.lock.LeaseJob(), first.lock.Token(), []byte("status"), []byte("stale"))
	var fenced *leasehold.FencedError
	if !errors.As(err, &fenced) || fenced.CurrentToken != third.lock.Token() {
		t.Fatalf("the first lock's write after it left: %v", err)
	}
	if v, err := c.CheckedWrite(ctx, third.lock.LeaseJob(), third.lock.Token(), []byte("status"), []byte("third")); err != nil || v != 2 {
		t.Fatalf("the third lock's write: version %d, %v", v, err)
	}
	close(second.leave)
	close(third.leave)
	for _, d := range done {
		if err := <-d; err != nil {
			t.Fatalf("a lock: %v", err)
		}
	}
	for _, j := range []string{job + "#0", job + "#1"} {
		if l, err := c.GetLease(ctx, j); err != nil || l.Holder != "" {
			t.Fatalf("%s not released: %+v %v", j, l, err)
		}
	}
}
