package main

// The worker's commands beyond its elector: lock, lock-write, unlock;
// follow, follow-stop; fleet, fleet-stop; history; delete-job; set-value,
// leader, waiters; acquire-slots.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// tracker counts what runs in the background (a lock, a follow, a
// fleet), so that the shutdown waits for each to resign.
type tracker struct {
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

var bg tracker

// start runs f in a goroutine, unless the worker is shutting down; the
// returned channel is closed once f has returned.
func (t *tracker) start(f func()) <-chan struct{} {
	done := make(chan struct{})
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		close(done)
		return done
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(done)
		f()
	}()
	return done
}

// wait waits for everything started, and starts nothing more.
func (t *tracker) wait() {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
	t.wg.Wait()
}

// background is a lock, a follow or a fleet: cancel and wait to stop it.
type background struct {
	cancel context.CancelFunc
	done   <-chan struct{}
}

func (b *background) stop() {
	if b == nil {
		return
	}
	b.cancel()
	<-b.done
}

// heldLock is the worker's lock (Client.WithLock), held until unlock.
type heldLock struct {
	background
	job   string
	mu    sync.Mutex
	token uint64 // the lock's token, kept after the loss or unlock
}

// stop leaves the critical section: releases the lease if still held.
func (l *heldLock) stop() {
	if l != nil {
		l.background.stop()
	}
}

func (l *heldLock) lastToken() uint64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// startLock takes the lock on job, waiting as long as it takes, and holds
// it until unlock (its ctx cancelled) or its loss.
func startLock(ctx context.Context, c *leasehold.Client, job, name string, ttl time.Duration) *heldLock {
	ctx, cancel := context.WithCancel(ctx)
	l := &heldLock{job: job}
	l.cancel = cancel
	l.done = bg.start(func() {
		err := c.WithLock(ctx, job, ttl, func(lctx context.Context, lock *leasehold.Lock) error {
			l.mu.Lock()
			l.token = lock.Token()
			l.mu.Unlock()
			say("lock held %s token=%d holder=%s", job, lock.Token(), lock.Holder())
			<-lctx.Done() // unlock, the worker's shutdown, or the loss
			if lock.Err() != nil {
				say("lock lost %s token=%d", job, lock.Token())
			}
			return nil
		}, leasehold.LockName(name))
		if err != nil && !errors.Is(err, leasehold.ErrLeaseLost) && ctx.Err() == nil {
			say("lock error %v", err)
		}
	})
	return l
}

// lockWrite writes value under "status" of the last lock's job, through a
// WriteStream, with that lock's token (even after its loss or unlock).
func lockWrite(c *leasehold.Client, l *heldLock, value string) string {
	token := l.lastToken()
	if token == 0 {
		return "write error never-locked"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, err := c.WriteStream(ctx)
	if err != nil {
		return fmt.Sprintf("write error %v", err)
	}
	defer ws.Close()
	out, err := ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(l.job, token, []byte("status"), []byte(value))})
	switch {
	case err != nil:
		return fmt.Sprintf("write error %v", err)
	case out[0].Kind == leasehold.OutcomeWritten:
		return fmt.Sprintf("write ok version=%d", out[0].Version)
	case out[0].Kind == leasehold.OutcomeFenced:
		return fmt.Sprintf("write fenced current=%d", out[0].CurrentToken)
	default:
		return fmt.Sprintf("write error %v", out[0].Err())
	}
}

// startFollow starts an Elector for job that reports every new leader,
// and an observation of job's lease; arg is "<job> [<value>]", the value
// the elector publishes.
func startFollow(ctx context.Context, c *leasehold.Client, arg, name string, ttl time.Duration) *background {
	job, value, _ := strings.Cut(arg, " ")
	e, err := leasehold.NewElector(c, leasehold.ElectorConfig{
		Job: job, Name: name, TTL: ttl, Value: []byte(value),
		Callbacks: leasehold.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, token uint64) { say("follow elected %s token=%d", job, token) },
			OnStoppedLeading: func(token uint64) { say("follow lost %s token=%d", job, token) },
			OnNewLeader: func(holder string, token uint64, value []byte) {
				say("newleader %s holder=%s token=%d%s", job, holder, token, valueSuffix(value))
			},
		},
	})
	if err != nil {
		say("follow error %v", err)
		return nil
	}
	say("follow holder %s", e.Holder())
	ctx, cancel := context.WithCancel(ctx)
	done := bg.start(func() {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := e.Run(ctx); err != nil {
				say("follow error %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			changes, wait := c.Observe(ctx, job)
			for ch := range changes {
				holder := ch.Lease.Holder
				if holder == "" {
					holder = "-"
				}
				// Every kind, VALUE_CHANGED included, in one format.
				say("observe %s holder=%s token=%d%s", job, holder, ch.Lease.Token, valueSuffix(ch.Lease.Value))
			}
			if err := wait(); err != nil {
				slog.Warn("the observation ended", "job", job, "error", err)
			}
		}()
		wg.Wait()
	})
	return &background{cancel: cancel, done: done}
}

// startFleet starts an ElectorSet for the jobs prefix0 .. prefix<n-1>;
// arg is "<n> <prefix>".
func startFleet(ctx context.Context, c *leasehold.Client, arg, name string, ttl time.Duration) *background {
	nText, prefix, _ := strings.Cut(arg, " ")
	n, err := strconv.Atoi(nText)
	if err != nil || n < 0 || prefix == "" {
		say("fleet error usage: fleet <n> <prefix>")
		return nil
	}
	set, err := leasehold.NewElectorSet(c, leasehold.ElectorSetConfig{
		Name: name, TTL: ttl,
		Callbacks: leasehold.ElectorSetCallbacks{
			OnStartedLeading: func(ctx context.Context, job string, token uint64) {
				say("fleet elected %s token=%d", job, token)
			},
			OnStoppedLeading: func(job string, token uint64) { say("fleet lost %s token=%d", job, token) },
		},
	})
	if err != nil {
		say("fleet error %v", err)
		return nil
	}
	say("fleet holder %s", set.Holder())
	for i := range n {
		if err := set.Campaign(fmt.Sprintf("%s%d", prefix, i)); err != nil {
			say("fleet error %v", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := bg.start(func() { _ = set.Run(ctx) })
	return &background{cancel: cancel, done: done}
}

// history is the first page of job's history: "<job> tokens=3,2,1".
func history(c *leasehold.Client, job string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	page, err := c.History(ctx, job, leasehold.HistoryOptions{})
	if err != nil {
		return fmt.Sprintf("error %v", err)
	}
	tokens := make([]string, len(page.Tenures))
	for i, t := range page.Tenures {
		tokens[i] = strconv.FormatUint(t.Token, 10)
	}
	return fmt.Sprintf("%s tokens=%s", job, strings.Join(tokens, ","))
}

func deleteJob(c *leasehold.Client, job string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deleted, err := c.DeleteJob(ctx, job)
	switch {
	case errors.Is(err, leasehold.ErrJobInUse):
		return "in-use"
	case err != nil:
		return fmt.Sprintf("error %v", err)
	case deleted:
		return "deleted"
	default:
		return "absent"
	}
}

// valueSuffix is " value=<v>" for a lease's value, "" when it is empty (the
// lines stay as they were without values).
func valueSuffix(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	return " value=" + string(v)
}

// setValue hands v to the elector, which sends it with its next renewal.
func setValue(e *leasehold.Elector, v string) string {
	if err := e.SetValue([]byte(v)); err != nil {
		return fmt.Sprintf("error %v", err)
	}
	return "done"
}

// leader is the elector's Leader(): "holder=<h> token=<N> value=<v>", "-"
// for a free job's holder and for an empty value.
func leader(e *leasehold.Elector) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.Leader(ctx)
	if err != nil {
		return fmt.Sprintf("error %v", err)
	}
	holder, value := l.Holder, string(l.Value)
	if holder == "" {
		holder = "-"
	}
	if value == "" {
		value = "-"
	}
	return fmt.Sprintf("holder=%s token=%d value=%s", holder, l.Token, value)
}

// waiters is job's line (ListWaiters): "n=<waiting> <holder>...", first in
// line first.
func waiters(c *leasehold.Client, job string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	line, err := c.ListWaiters(ctx, job, 0)
	if err != nil {
		return fmt.Sprintf("error %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "n=%d", line.Waiting)
	for _, w := range line.Waiters {
		b.WriteString(" " + w.Holder)
	}
	return b.String()
}

// acquireSlots is a one-shot Acquire of one of n slots of job's counted
// lease, wait 0, as a fresh holder with the worker's TTL; arg is
// "<job> <n>". The lease it gets is left to expire. "ok job=<slot job>
// slot=<k> token=<T>", "busy", "invalid field=<field>" (the typed
// invalid-argument error) or "error <msg>".
func acquireSlots(c *leasehold.Client, arg, name string, ttl time.Duration) string {
	job, nText, _ := strings.Cut(arg, " ")
	n, err := strconv.ParseUint(nText, 10, 32)
	if err != nil {
		return "error usage: acquire-slots <job> <n>"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holder := name + "@" + uuid()
	a, err := c.Acquire(ctx, job, holder, ttl, 0, leasehold.AcquireSlots(uint32(n)))
	var ia *leasehold.InvalidArgumentError
	switch {
	case errors.As(err, &ia):
		return "invalid field=" + ia.Field
	case err != nil:
		return fmt.Sprintf("error %v", err)
	case !a.Acquired:
		return "busy"
	}
	return fmt.Sprintf("ok job=%s slot=%d token=%d", a.Lease.Job, a.Lease.Slot, a.Lease.Token)
}

// uuid is a new random (version 4) UUID.
func uuid() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
