package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// The chaos API's test helper (Client.Chaos) against a real server started
// with --enable-chaos: the README's example (a worker steps down when its
// lease is expired on purpose), then each method.

// chaosTTL: the leases of these tests. Short, so that a test is quick, and
// five times a stall of a loaded machine.
const chaosTTL = 5 * time.Second

// The README's example: a worker leads and does guarded work (writes with
// its token) while a standby waits. The test expires the worker's lease:
// the standby is elected with the next token at once, the worker's next
// renewal is LEASE_LOST, so it reports the loss (its leader context is
// cancelled, OnStoppedLeading follows) well before its own deadline; its
// guarded work has stopped, and a write with its old token is fenced.
func TestChaosExpireMakesTheWorkerStepDown(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("chaos-expire")

	rec := &recorder{}
	var writes atomic.Int64
	worker, err := leasehold.NewElector(c, leasehold.ElectorConfig{
		Job: job, Name: "worker", TTL: chaosTTL, Logger: quiet,
		Callbacks: leasehold.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, token uint64) {
				rec.add(fmt.Sprintf("elected %d", token))
				// The guarded work: write with the token until the
				// leadership ends or a write is fenced.
				for ctx.Err() == nil {
					_, err := c.CheckedWrite(ctx, job, token, []byte("progress"), []byte("step"))
					if errors.Is(err, leasehold.ErrFenced) {
						break
					}
					if err == nil {
						writes.Add(1)
					}
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
				rec.add(fmt.Sprintf("work stopped %d", token))
			},
			OnStoppedLeading: func(token uint64) { rec.add(fmt.Sprintf("lost %d", token)) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = worker.Run(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	waitUntil(t, patience, "the worker leads and writes", func() bool { return worker.IsLeader() && writes.Load() > 0 })
	standby := start(t, c, job, "standby", chaosTTL)
	s.waitWaiters(t, 1)

	expired := time.Now()
	out, err := c.Chaos().Expire(ctx, job)
	if err != nil || out.Lease.Job != job || out.Lease.Holder == worker.Holder() || out.InForce != "" {
		t.Fatalf("expire: %+v %v", out, err)
	}
	waitUntil(t, patience, "the standby leads", standby.IsLeader)
	if tok, _ := standby.Token(); tok != 2 {
		t.Fatalf("standby token %d", tok)
	}
	waitUntil(t, patience, "the worker reports the loss", func() bool { return rec.has("lost 1") })
	// The loss came from a renewal (every TTL/3), not from the worker's
	// own deadline (at least 2/3 of the TTL after the expiry).
	if d := time.Since(expired); d >= 2*chaosTTL/3 {
		t.Fatalf("the worker stepped down %v after the expiry", d)
	}
	if worker.IsLeader() {
		t.Fatal("the worker still leads")
	}
	if got := rec.get(); len(got) != 3 || got[0] != "elected 1" || got[1] != "work stopped 1" || got[2] != "lost 1" {
		t.Fatalf("the worker's events %v", got)
	}
	n := writes.Load()
	_, err = c.CheckedWrite(ctx, job, 1, []byte("progress"), []byte("late"))
	var fenced *leasehold.FencedError
	if !errors.As(err, &fenced) || fenced.CurrentToken != 2 {
		t.Fatalf("the worker's write with its old token: %v", err)
	}
	if writes.Load() != n {
		t.Fatal("the guarded work went on")
	}
	if end := tenureEnd(t, s, job, 1); end != pb.Tenure_END_CHAOS {
		t.Fatalf("tenure 1 ended %v", end)
	}
}

// Fence(job, 2): the next two writes are FENCED, whatever their token; the
// third lands.
func TestChaosFenceFailsTheNextWrites(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("chaos-fence")
	a, err := c.Acquire(ctx, job, "w", chaosTTL, 0)
	if err != nil || !a.Acquired {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	out, err := c.Chaos().Fence(ctx, job, 2)
	if err != nil || !strings.Contains(out.InForce, "2 writes to fence") || out.Lease.Holder != "w" || out.Lease.Token != a.Lease.Token {
		t.Fatalf("fence: %+v %v", out, err)
	}
	for i := 0; i < 2; i++ {
		_, err := c.CheckedWrite(ctx, job, a.Lease.Token, []byte("k"), []byte("v"))
		var fenced *leasehold.FencedError
		if !errors.As(err, &fenced) || !errors.Is(err, leasehold.ErrFenced) {
			t.Fatalf("write %d: %v", i+1, err)
		}
	}
	if v, err := c.CheckedWrite(ctx, job, a.Lease.Token, []byte("k"), []byte("v")); err != nil || v != 1 {
		t.Fatalf("third write: %d %v", v, err)
	}
	if out, err := c.Chaos().Clear(ctx, job); err != nil || out.InForce != "" {
		t.Fatalf("clear: %+v %v", out, err)
	}
}

// Delay(job, d): an answer about the job takes at least d.
func TestChaosDelayHoldsTheAnswers(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("chaos-delay")
	if _, err := c.Acquire(ctx, job, "w", chaosTTL, 0); err != nil {
		t.Fatal(err)
	}
	const by = 300 * time.Millisecond
	out, err := c.Chaos().Delay(ctx, job, by)
	if err != nil || !strings.Contains(out.InForce, "answers delayed by 300ms") {
		t.Fatalf("delay: %+v %v", out, err)
	}
	t0 := time.Now()
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "w" {
		t.Fatalf("get: %+v %v", l, err)
	}
	if d := time.Since(t0); d < by {
		t.Fatalf("GetLease answered in %v", d)
	}
	if out, err := c.Chaos().Clear(ctx, job); err != nil || out.InForce != "" {
		t.Fatalf("clear: %+v %v", out, err)
	}
}

// Pause(job, d): the holder's renewals are LEASE_LOST, as if late, while
// GetLease still shows it as the holder; once cleared, they are heard.
func TestChaosPauseRefusesTheHoldersRenewals(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("chaos-pause")
	a, err := c.Acquire(ctx, job, "w", chaosTTL, 0)
	if err != nil || !a.Acquired {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	out, err := c.Chaos().Pause(ctx, job, time.Minute)
	if err != nil || !strings.Contains(out.InForce, "w paused for") || out.Lease.Holder != "w" {
		t.Fatalf("pause: %+v %v", out, err)
	}
	_, err = c.Renew(ctx, job, "w", a.Lease.Token, chaosTTL)
	var lost *leasehold.LeaseLostError
	if !errors.As(err, &lost) || !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("renew while paused: %v", err)
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "w" || l.Token != a.Lease.Token {
		t.Fatalf("get while paused: %+v %v", l, err)
	}
	if out, err := c.Chaos().Clear(ctx, job); err != nil || out.InForce != "" {
		t.Fatalf("clear: %+v %v", out, err)
	}
	if _, err := c.Renew(ctx, job, "w", a.Lease.Token, chaosTTL); err != nil {
		t.Fatalf("renew after clear: %v", err)
	}
}

// Transfer(job): the first waiter is granted token+1 at once; with nobody
// waiting, a *NoSuccessorError.
func TestChaosTransferHandsTheLeaseToTheWaiter(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("chaos-transfer")
	a, err := c.Acquire(ctx, job, "a", chaosTTL, 0)
	if err != nil || !a.Acquired {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	got := waitAcquire(c, job, "b", chaosTTL)
	s.waitWaiters(t, 1)
	out, err := c.Chaos().Transfer(ctx, job)
	if err != nil || out.Lease.Holder != "b" || out.Lease.Token != a.Lease.Token+1 {
		t.Fatalf("transfer: %+v %v", out, err)
	}
	if b := <-got; !b.Acquired || b.Lease.Holder != "b" || b.Lease.Token != a.Lease.Token+1 {
		t.Fatalf("the waiter: %+v", b)
	}
	if _, err := c.Renew(ctx, job, "a", a.Lease.Token, chaosTTL); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("the old holder's renewal: %v", err)
	}
	if end := tenureEnd(t, s, job, a.Lease.Token); end != pb.Tenure_END_TRANSFERRED {
		t.Fatalf("tenure %d ended %v", a.Lease.Token, end)
	}
	_, err = c.Chaos().Transfer(ctx, job)
	var none *leasehold.NoSuccessorError
	if !errors.As(err, &none) || !errors.Is(err, leasehold.ErrNoSuccessor) {
		t.Fatalf("transfer with nobody waiting: %v", err)
	}
	if l, _ := c.GetLease(ctx, job); l.Holder != "b" || l.Token != a.Lease.Token+1 {
		t.Fatalf("after the refused transfer: %+v", l)
	}
}

// Clear(job) clears one job's chaos; Clear("") every job's.
func TestChaosClearClearsOneJobOrEvery(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx := dial(t, s), ctxT(t)
	one, two := uniqueJob("chaos-clear"), uniqueJob("chaos-clear")
	tokens := map[string]uint64{}
	for _, job := range []string{one, two} {
		a, err := c.Acquire(ctx, job, "w", chaosTTL, 0)
		if err != nil || !a.Acquired {
			t.Fatalf("acquire %s: %+v %v", job, a, err)
		}
		tokens[job] = a.Lease.Token
		if _, err := c.Chaos().Fence(ctx, job, 10); err != nil {
			t.Fatal(err)
		}
	}
	write := func(job string) error {
		_, err := c.CheckedWrite(ctx, job, tokens[job], []byte("k"), []byte("v"))
		return err
	}
	out, err := c.Chaos().Clear(ctx, one)
	if err != nil || out.InForce != "" || out.Lease.Job != one || out.Lease.Holder != "w" {
		t.Fatalf("clear %s: %+v %v", one, out, err)
	}
	if err := write(one); err != nil {
		t.Fatalf("write after its clear: %v", err)
	}
	if err := write(two); !errors.Is(err, leasehold.ErrFenced) {
		t.Fatalf("the other job's write: %v", err)
	}
	if _, err := c.Chaos().Delay(ctx, two, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	out, err = c.Chaos().Clear(ctx, "")
	if err != nil || out.InForce != "" || !reflect.DeepEqual(out.Lease, leasehold.Lease{}) {
		t.Fatalf("clear every job: %+v %v", out, err)
	}
	if err := write(two); err != nil {
		t.Fatalf("write after clearing every job: %v", err)
	}
	if out, err := c.Chaos().Fence(ctx, two, 1); err != nil || out.InForce != "1 writes to fence" {
		t.Fatalf("nothing else in force: %+v %v", out, err)
	}
}

// Expire of a job nobody holds changes nothing; bad input is refused with
// the field at fault.
func TestChaosExpireOfAFreeJobAndBadInput(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("chaos-input")
	a, err := c.Acquire(ctx, job, "w", chaosTTL, 0)
	if err != nil || !a.Acquired {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	if err := c.Release(ctx, job, "w", a.Lease.Token); err != nil {
		t.Fatal(err)
	}
	out, err := c.Chaos().Expire(ctx, job)
	if err != nil || out.Lease.Holder != "" || out.Lease.Token != a.Lease.Token {
		t.Fatalf("expire of a free job: %+v %v", out, err)
	}
	for name, call := range map[string]func() (leasehold.ChaosOutcome, error){
		"expire no job": func() (leasehold.ChaosOutcome, error) { return c.Chaos().Expire(ctx, "") },
		"pause 0":       func() (leasehold.ChaosOutcome, error) { return c.Chaos().Pause(ctx, job, 0) },
		"delay 61s":     func() (leasehold.ChaosOutcome, error) { return c.Chaos().Delay(ctx, job, 61*time.Second) },
		"fence 0":       func() (leasehold.ChaosOutcome, error) { return c.Chaos().Fence(ctx, job, 0) },
	} {
		_, err := call()
		var bad *leasehold.InvalidArgumentError
		if !errors.As(err, &bad) || bad.Field == "" {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A server without --enable-chaos: every call is a *ChaosDisabledError
// that says how to turn it on, and nothing changes.
func TestChaosWithoutEnableChaosSaysSo(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("chaos-off")
	a, err := c.Acquire(ctx, job, "w", chaosTTL, 0)
	if err != nil || !a.Acquired {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	for name, call := range map[string]func() (leasehold.ChaosOutcome, error){
		"expire":   func() (leasehold.ChaosOutcome, error) { return c.Chaos().Expire(ctx, job) },
		"pause":    func() (leasehold.ChaosOutcome, error) { return c.Chaos().Pause(ctx, job, time.Second) },
		"delay":    func() (leasehold.ChaosOutcome, error) { return c.Chaos().Delay(ctx, job, time.Second) },
		"fence":    func() (leasehold.ChaosOutcome, error) { return c.Chaos().Fence(ctx, job, 1) },
		"transfer": func() (leasehold.ChaosOutcome, error) { return c.Chaos().Transfer(ctx, job) },
		"clear":    func() (leasehold.ChaosOutcome, error) { return c.Chaos().Clear(ctx, "") },
	} {
		_, err := call()
		var off *leasehold.ChaosDisabledError
		if !errors.As(err, &off) || !errors.Is(err, leasehold.ErrChaosDisabled) ||
			!strings.Contains(err.Error(), "--enable-chaos") || status.Code(err) != codes.Unimplemented ||
			leasehold.Retryable(err) {
			t.Errorf("%s: %#v", name, err)
		}
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "w" || l.Token != a.Lease.Token {
		t.Fatalf("after: %+v %v", l, err)
	}
	if _, err := c.CheckedWrite(ctx, job, a.Lease.Token, []byte("k"), []byte("v")); err != nil {
		t.Fatalf("write: %v", err)
	}
}
