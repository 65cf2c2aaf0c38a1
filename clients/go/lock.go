package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultLockName is the holder name of a lock given none (LockName): its
// holder is "lock@<uuid>".
const DefaultLockName = "lock"

// LockOption is an option of Client.WithLock.
type LockOption func(*lockOptions)

type lockOptions struct {
	name   string
	logger *slog.Logger
	slots  uint32
}

// LockName sets the name of the lock's holder identity, name@<uuid>
// (DefaultLockName otherwise). Each lock makes a UUID of its own, so two
// locks with one name are two holders.
func LockName(name string) LockOption { return func(o *lockOptions) { o.name = name } }

// LockSlots(n) makes the lock a counted one (a semaphore, AcquireSlots):
// up to n locks of the job are held at once, 2 to MaxSlots, each in a
// slot of its own, the job "{job}#{k}" with its own token (Lock.LeaseJob,
// Lock.Slot): the lock renews and releases it, and writes fenced by the
// lock's token must name it. The line is first come, first served. The
// count is fixed by the job's first counted grant; another count is an
// *InvalidArgumentError (Field "slots") from WithLock, fn not called.
// 0 or 1: the ordinary lock, one holder at a time.
func LockSlots(n uint32) LockOption { return func(o *lockOptions) { o.slots = n } }

// LockLogger sets the logger of the lock's warnings (renewals that failed,
// a loss); slog.Default() otherwise.
func LockLogger(l *slog.Logger) LockOption { return func(o *lockOptions) { o.logger = l } }

// Lock is the lease WithLock holds while its func runs. Its methods are
// safe for concurrent use.
type Lock struct {
	job    string
	holder string
	ttl    time.Duration
	slots  uint32

	mu       sync.Mutex
	leaseJob string // the job the grant is on: job, or a slot's job
	slot     uint32
	token    uint64
	proof    string
	deadline time.Time
	lost     *LockLostError // why we lost it, once we did
	released bool
	lostCh   chan struct{} // closed on a loss
}

// Job is the locked job, as WithLock was given it.
func (l *Lock) Job() string { return l.job }

// LeaseJob is the job the lock's lease is on: Job, or for a counted lock
// (LockSlots) its slot's job, "{job}#{slot}". Writes fenced by Token name
// it: the token is that job's. It stays set after the lock is lost or
// released, as Token does.
func (l *Lock) LeaseJob() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaseJob
}

// Slot is the slot of a counted lock (LockSlots), and true; 0 and false
// for an ordinary lock.
func (l *Lock) Slot() (uint32, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slot, l.leaseJob != l.job
}

// Holder is the lock's holder identity, name@uuid, with a UUID of its own.
func (l *Lock) Holder() string { return l.holder }

// TTL is the lease's TTL; it is renewed every TTL/3.
func (l *Lock) TTL() time.Duration { return l.ttl }

// Token is the fencing token of our grant: carry it into every write
// (CheckedWrite, a WriteStream's Put). It stays set after the lock is
// lost or released: a write with it is then fenced once another holder
// has the job.
func (l *Lock) Token() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// Proof is the proof of our grant (Lease.Proof), for storage that
// verifies proofs (VerifyProof); "" when the server signs nothing. It
// proves the token was issued, not that we still hold the lock.
func (l *Lock) Proof() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proof
}

// IsHeld reports whether we hold the lease now: not lost, not released,
// and before our own deadline (checked here, so it turns false on time
// even if the renewing goroutine has not caught up).
func (l *Lock) IsHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token != 0 && l.lost == nil && !l.released && time.Now().Before(l.deadline)
}

// Lost is closed when the lock is lost (its func's ctx is cancelled at the
// same moment, with the *LockLostError as its cause). A plain release
// after the func returned does not close it.
func (l *Lock) Lost() <-chan struct{} { return l.lostCh }

// Err is nil while the lock is held or after a plain release; once lost,
// the *LockLostError that says why (its Err is nil here: the func has not
// necessarily returned).
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		return nil
	}
	return l.lost
}

func (l *Lock) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leaseJob != l.job {
		return fmt.Sprintf("Lock(job=%s lease_job=%s holder=%s token=%d)", l.job, l.leaseJob, l.holder, l.token)
	}
	return fmt.Sprintf("Lock(job=%s holder=%s token=%d)", l.job, l.holder, l.token)
}

// LockLostError is what WithLock returns when the lock was lost while its
// func ran: the server refused a renewal (the lease expired or went to
// someone else: LEASE_LOST, or an error retrying cannot fix), or no
// renewal succeeded before the lock's own deadline (the instant the last
// successful grant or renewal was sent, plus the TTL; the server counts
// from later, so it cannot have given the lease away before). What the
// func did after that was not under the lock: its writes with the token
// are fenced once another holder has the job.
//
// errors.Is(err, ErrLeaseLost) holds, and so does errors.Is or errors.As
// for the Cause and for the func's own Err (often context.Canceled: its
// ctx was cancelled on the loss).
type LockLostError struct {
	// Job is the job the lock's lease was on (Lock.LeaseJob: a counted
	// lock's slot job).
	Job   string
	Token uint64
	// DeadlinePassed: no renewal succeeded before our deadline (Cause is
	// the last failed renewal's error, if any). Otherwise Cause is the
	// renewal's refusal (a *LeaseLostError, with the current holder and
	// token).
	DeadlinePassed bool
	Cause          error
	// Err is what the func returned (nil if it returned nil).
	Err error
}

func (e *LockLostError) Error() string {
	msg := fmt.Sprintf("leasehold: lock on %s (token %d) lost: ", e.Job, e.Token)
	if e.DeadlinePassed {
		msg += "no renewal succeeded before its deadline"
		if e.Cause != nil {
			msg += " (last: " + e.Cause.Error() + ")"
		}
	} else if e.Cause != nil {
		msg += e.Cause.Error()
	}
	if e.Err != nil {
		msg += "; the func returned: " + e.Err.Error()
	}
	return msg
}

func (e *LockLostError) Is(target error) bool { return target == ErrLeaseLost }

func (e *LockLostError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Cause, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// WithLock runs fn while holding job's lease: a scoped critical section.
//
// It waits for the lease as long as ctx allows (a waiting Acquire, asked
// again every 3*ttl, 1 s to 30 s; so a release hands over at once); if
// ctx is done first it returns a *ContextError (errors.Is(err,
// context.DeadlineExceeded) or context.Canceled) and holds nothing: a
// grant that came as it gave up is given back. It then calls fn with the
// lock, and renews the lease every ttl/3 in the background while fn runs.
// When fn returns (also with an error, or by a panic, which goes on), it
// stops renewing and releases the lease (bounded by our deadline, at
// least 200 ms).
//
// fn's ctx is derived from ctx and is also cancelled the moment the lock
// is lost: the server refused a renewal, or no renewal succeeded before
// our deadline (see LockLostError). context.Cause(ctx) is then the
// *LockLostError, and lock.Lost() is closed. Return promptly then: what
// fn does afterwards is no longer under the lock.
//
// WithLock returns fn's error, or a *LockLostError when the lock was lost
// while fn ran (whatever fn returned: its error is kept in the
// LockLostError's Err), so that a lost lock is never mistaken for work
// done under it. A campaign the server refuses with an error retrying
// cannot fix (ErrInvalidArgument, ErrUnauthenticated,
// ErrPermissionDenied) is returned at once, fn not called; other failed
// Acquires are retried with backoff until ctx is done.
//
// The lock is its own holder, name@uuid (LockName; "lock" by default),
// so two locks on one job exclude each other, in one process or in two:
// a lock is not re-entrant. With LockSlots(n) up to n of them hold the
// job at once (consul lock -n), each in a slot's job, Lock.LeaseJob.
//
//	err := client.WithLock(ctx, "reports", 10*time.Second, func(ctx context.Context, lock *leasehold.Lock) error {
//		_, err := client.CheckedWrite(ctx, "reports", lock.Token(), []byte("cursor"), []byte("42"))
//		return err // a *FencedError if the lock was lost meanwhile
//	})
//	if errors.Is(err, leasehold.ErrLeaseLost) { /* lost while working: redo or check */ }
func (c *Client) WithLock(ctx context.Context, job string, ttl time.Duration, fn func(ctx context.Context, lock *Lock) error, opts ...LockOption) error {
	o := lockOptions{name: DefaultLockName}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case job == "":
		return &InvalidArgumentError{Message: "WithLock: the job is required", Field: "job"}
	case o.name == "":
		return &InvalidArgumentError{Message: "WithLock: the lock's name is required", Field: "holder"}
	case ttl <= 0:
		return &InvalidArgumentError{Message: "WithLock: the TTL must be positive", Field: "ttl"}
	}
	log := o.logger
	if log == nil {
		log = slog.Default()
	}
	l := &Lock{job: job, holder: electorHolder(o.name), ttl: ttl, slots: o.slots, leaseJob: job, lostCh: make(chan struct{})}
	log = log.With("job", job, "holder", l.holder)
	r := &lockRun{client: c, lock: l, log: log}
	grant, anchor, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.token, l.proof, l.deadline = grant.Token, grant.Proof, anchor.Add(ttl)
	if grant.Counted() && grant.Job != "" {
		l.leaseJob, l.slot = grant.Job, grant.Slot
	}
	l.mu.Unlock()
	if l.leaseJob != job {
		r.log = log.With("lease_job", l.leaseJob)
	}

	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.cancel = cancel
	// Renewals and the release go on while fn runs even if ctx is
	// cancelled: fn works under the lock until it returns. stopRenewing
	// ends them (and a renewal in flight) once it has.
	rctx, stopRenewing := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan struct{})
	go func() { defer close(renewed); r.renew(rctx, anchor) }()

	var fnErr error
	func() {
		defer func() {
			stopRenewing()
			<-renewed
			r.release(context.WithoutCancel(ctx))
		}()
		fnErr = fn(fctx, l)
	}()
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost != nil {
		out := *lost
		out.Err = fnErr
		return &out
	}
	return fnErr
}

// lockRun is one WithLock's machinery.
type lockRun struct {
	client *Client
	lock   *Lock
	log    *slog.Logger
	cancel context.CancelCauseFunc
	warned warnings
}

func (r *lockRun) warn(msg string, args ...any) {
	r.log.Debug(msg, args...)
	if n, ok := r.warned.allow(time.Now()); ok {
		r.log.Warn(msg, append(args, "suppressed", n)...)
	}
}

// acquire waits for the lease until ctx is done; it returns the grant
// and the instant the lease's TTL may be counted from (see
// Elector.anchor).
func (r *lockRun) acquire(ctx context.Context) (Lease, time.Time, error) {
	l := r.lock
	t := timingFor(l.ttl)
	retry := campaignBackoff(l.ttl)
	for {
		if err := ctxDone(ctx); err != nil {
			return Lease{}, time.Time{}, &ContextError{Err: err}
		}
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, t.campaignWait+l.ttl)
		a, err := r.client.Acquire(actx, l.job, l.holder, l.ttl, t.campaignWait, AcquireSlots(l.slots))
		cancel()
		if err != nil {
			if cerr := ctxDone(ctx); cerr != nil {
				// The caller's ctx ended the wait, not the per-call
				// bound. The Acquire gives back a grant that came late.
				cause := err
				var ce *ContextError
				if errors.As(err, &ce) {
					cause = ce.Cause
				}
				return Lease{}, time.Time{}, &ContextError{Err: cerr, Cause: cause}
			}
			if refused(err) {
				return Lease{}, time.Time{}, err
			}
			if errors.Is(err, context.DeadlineExceeded) {
				r.warn("lock: acquire timed out; asking again")
				continue
			}
			r.warn("lock: acquire failed; retrying", "error", err)
			if !sleepCtx(ctx, retry.next()) {
				return Lease{}, time.Time{}, &ContextError{Err: ctx.Err(), Cause: err}
			}
			continue
		}
		retry.reset()
		if !a.Acquired {
			continue // the server's wait ran out: ask again
		}
		if time.Since(sent) < l.ttl/10 {
			return a.Lease, sent, nil
		}
		// Granted long after it was sent: counted from the send, our
		// deadline could be near or past. A Renew sent now confirms it.
		job := lockJobOf(l.job, a.Lease)
		at := time.Now()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl/2)
		_, err = r.client.Renew(rctx, job, l.holder, a.Lease.Token, l.ttl)
		cancel()
		if err == nil && ctx.Err() == nil {
			return a.Lease, at, nil
		}
		r.giveUp(job, a.Lease.Token)
		if cerr := ctxDone(ctx); cerr != nil {
			return Lease{}, time.Time{}, &ContextError{Err: cerr}
		}
		r.log.Warn("lock: granted, but the confirming renew failed; asking again", "token", a.Lease.Token, "error", err)
	}
}

// lockJobOf is the job a lock's grant is on: a counted grant's slot job,
// else the locked job.
func lockJobOf(job string, grant Lease) string {
	if grant.Counted() && grant.Job != "" {
		return grant.Job
	}
	return job
}

// giveUp releases a grant on job we will not use, briefly, best effort
// (it runs out on its own otherwise).
func (r *lockRun) giveUp(job string, token uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = r.client.Release(ctx, job, r.lock.holder, token)
}

// renew renews the lease every ttl/3 until ctx is done (fn returned), and
// reports a loss: a renewal refused, or our deadline reached without a
// renewal.
func (r *lockRun) renew(ctx context.Context, anchor time.Time) {
	l := r.lock
	job := l.LeaseJob()
	every := timingFor(l.ttl).every
	retry := renewBackoff(l.ttl)
	deadline := anchor.Add(l.ttl)
	next := anchor.Add(every)
	var lastErr error
	for {
		wake := next
		if deadline.Before(wake) {
			wake = deadline
		}
		if !sleepCtx(ctx, time.Until(wake)) {
			return
		}
		now := time.Now()
		if !now.Before(deadline) {
			r.lose(&LockLostError{Job: job, Token: l.token, DeadlinePassed: true, Cause: lastErr})
			return
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		lease, err := r.client.Renew(rctx, job, l.holder, l.token, l.ttl)
		cancel()
		if ctx.Err() != nil {
			return // fn returned: the release comes next
		}
		if err == nil {
			deadline = now.Add(l.ttl)
			next = now.Add(every)
			retry.reset()
			lastErr = nil
			l.mu.Lock()
			l.deadline = deadline
			l.proof = lease.Proof
			l.mu.Unlock()
			continue
		}
		if errors.Is(err, ErrLeaseLost) || refused(err) {
			r.lose(&LockLostError{Job: job, Token: l.token, Cause: err})
			return
		}
		lastErr = err
		r.warn("lock: renew failed; retrying", "token", l.token, "error", err)
		next = time.Now().Add(retry.nextBefore(deadline))
	}
}

// lose records the loss and cancels fn's ctx with it.
func (r *lockRun) lose(err *LockLostError) {
	l := r.lock
	l.mu.Lock()
	if l.lost != nil {
		l.mu.Unlock()
		return
	}
	l.lost = err
	l.mu.Unlock()
	r.log.Warn("lock lost", "token", err.Token, "error", err)
	close(l.lostCh)
	r.cancel(err)
}

// release ends the lease once fn has returned: bounded by our deadline
// (at least 200 ms); past it the lease runs out on its own. A lock found
// past its deadline is lost (fn ran on without it), even if the renewing
// goroutine had not yet said so.
func (r *lockRun) release(ctx context.Context) {
	l := r.lock
	l.mu.Lock()
	job, token, deadline, lost := l.leaseJob, l.token, l.deadline, l.lost != nil
	l.released = true
	l.mu.Unlock()
	if !lost && !time.Now().Before(deadline) {
		r.lose(&LockLostError{Job: job, Token: token, DeadlinePassed: true})
		lost = true
	}
	l.mu.Lock()
	serverSaidLost := l.lost != nil && !l.lost.DeadlinePassed
	l.mu.Unlock()
	if serverSaidLost {
		return // nothing of ours to release
	}
	bound := max(time.Until(deadline), 200*time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := r.client.Release(rctx, job, l.holder, token); err != nil && !lost {
		r.log.Warn("lock: release failed; the lease runs out at its TTL", "token", token, "error", err)
	}
}

// ctxDone is ctx.Err(), or context.DeadlineExceeded once ctx's deadline
// has passed on the clock: the server ends a call at the deadline the
// client sent, and its answer can come before ctx's timer has fired.
func ctxDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
