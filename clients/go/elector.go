package leasehold

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// LeaderCallbacks are called as leadership changes, in the style of
// client-go's leaderelection.
type LeaderCallbacks struct {
	// OnStartedLeading runs in its own goroutine when we become leader with
	// token. ctx is cancelled the moment we stop leading (lost, our own
	// deadline passed, or Run's context is done): return promptly then.
	// Carry token into every write (or the grant's proof, Elector.Proof,
	// to storage that verifies proofs), with the job the lease is on:
	// LeaseJobFrom(ctx) (a counted lease's slot job, ElectorConfig.Slots;
	// else the elector's job).
	OnStartedLeading func(ctx context.Context, token uint64)
	// OnStoppedLeading is called when leadership with token ended, after
	// OnStartedLeading for that token has returned.
	//
	// Each term's callbacks start after the previous term's have returned,
	// and Run returns only after the last term's have.
	OnStoppedLeading func(token uint64)
	// OnNewLeader is called when the job's leader, as this elector observes
	// it, changes: another holder took over, or we did (holder is then
	// Holder()), with the token of that leader's grant and the value it
	// published (Lease.Value, as the report saw it; nil when none: where to
	// reach the leader). A change of the leader's value alone is no new
	// leader and is not reported (Leader or Client.Observe see it). It is called at
	// most once per grant, in the order of the tokens, one call at a time on a
	// goroutine of its own, and not after Run has returned. A free job (no
	// leader) is not reported.
	//
	// Not with ElectorConfig.Slots: a counted lease has several leaders
	// at once, each in its own slot's job (NewElector refuses the two
	// together); observe each slot's job, "{job}#{k}", instead.
	//
	// When it is set, Run watches the job (a WatchLease stream, opened
	// again with backoff if it breaks) for the whole of the campaign, and
	// also reports what the campaign itself learns (our own grant, the
	// holder a campaign found in place), so a broken watch delays a report
	// of someone else's leadership but never of our own. Tokens of a job
	// only grow, so a grant is reported only if its token is above the
	// last one reported: the watch and the campaign never report one
	// leader twice, or an older one after a newer. Our own grant may be
	// reported a moment before OnStartedLeading is called and IsLeader
	// turns true: the watch can be faster than the Acquire's answer.
	OnNewLeader func(holder string, token uint64, value []byte)
}

// ElectorConfig configures an Elector.
type ElectorConfig struct {
	// Job to lead. Required.
	Job string
	// Name for the holder identity Name@<uuid>, with a UUID made for this
	// elector, so two electors in one process are two holders. Required
	// unless Holder is set.
	Name string
	// Holder overrides the holder identity.
	Holder string
	// TTL of the lease; renewals go out every TTL/3. Required.
	TTL time.Duration
	// Value is published with every Acquire of the campaign (AcquireValue):
	// the lease's Value while we lead, where to reach us (an address, say),
	// which followers read with Leader, Client.GetLease, Client.Observe or
	// OnNewLeader. SetValue changes it. At most MaxValueBytes (a string:
	// []byte(addr)). Advisory: the token fences, not the value.
	Value []byte
	// Callbacks, all optional.
	Callbacks LeaderCallbacks
	// Logger for warnings; slog.Default() when nil.
	Logger *slog.Logger
	// BindToStream binds every grant of the campaign to the client's
	// connection (each Acquire is made with BindToStream(true)): when this
	// process dies, or the client is closed, the server releases the lease
	// at once and the next elector leads without waiting out the TTL. A
	// paused process or a partition releases nothing (the TTL runs as
	// usual). The trade: a live leader whose connection is cut (a proxy
	// that closes it, a reconnect) loses its lease at once; its writes
	// are then fenced, and it steps down at its next renewal. Default
	// false.
	BindToStream bool
	// Preferred makes every Acquire of the campaign a preferred one
	// (Preferred(true)): queued ahead of the candidates that are not (first
	// come, first served within each class), and a leader that is not
	// preferred is told in its renewals that we wait, so that it can hand
	// over (it does if it yields, YieldToPreferred). Nothing is taken from
	// a leader that does not yield. Default false.
	Preferred bool
	// YieldToPreferred: when a renewal's answer says a preferred candidate
	// waits (Renewed.SuccessorWaiting, never said to a preferred leader),
	// hand the lease over right after that renewal, to the first in line,
	// as Transfer(ctx, "") does: the end of the leadership is reported as
	// on a loss (the leader context is cancelled, OnStoppedLeading
	// follows), and the elector campaigns again, queued behind its
	// successor. If the candidate left meanwhile (ErrNoSuccessor) it goes
	// on leading, and the next renewal says again; if the lease was lost
	// (ErrLeaseLost) it steps down as usual. Default false.
	YieldToPreferred bool
	// Slots, 2 to MaxSlots, campaigns for one of that many slots of a
	// counted lease on Job (a semaphore, AcquireSlots): up to Slots
	// electors lead at once, each in a slot of its own, "{Job}#{k}", with
	// its own token. While leading, LeaseJob names that slot's job (and
	// the leader context, LeaseJobFrom): the elector renews, releases and
	// transfers with it, and writes fenced by its token must name it.
	// After a loss it campaigns for Job again, and may lead in another
	// slot. The count is fixed by the job's first counted grant: another
	// count (or one over MaxSlots) is refused by the server, and Run
	// returns that *InvalidArgumentError (Field "slots"). 0 or 1: the
	// ordinary lease. Leader and Client.GetLease(Job) show the line's turn
	// (the first waiter) for a counted lease, not a slot's holder.
	Slots uint32
}

// ErrNotLeader: Elector.Transfer was called while the elector does not
// lead. The server was not called.
var ErrNotLeader = errors.New("leasehold: not the leader")

// Elector campaigns for one job. Run drives it: it campaigns with a
// waiting Acquire (a release hands over at once), renews every TTL/3, and
// steps down no later than its own deadline: the instant the last
// successful grant or renewal was sent, plus the TTL. The server counts
// the TTL from when it received that request, later, so the elector
// believes it has lost before the server can give the lease away, even
// when the server cannot be reached. Failed calls are retried with
// jittered exponential backoff (a campaign from 10-100 ms up to 1 s; a
// renewal from TTL/10, never waiting past half the time left to its
// deadline); their warnings are limited to one every 5 s, with the count
// of those suppressed, and each attempt is logged at debug level. After
// losing it campaigns again,
// until Run's context is done; then it releases the lease (bounded) and
// returns.
//
// Transfer hands the leadership to a waiting elector (or Acquire) at
// once, with no moment without a leader. With YieldToPreferred, the
// elector does so itself, to the first in line, at the first renewal that
// says a preferred candidate waits (ElectorConfig.Preferred).
//
// What no elector can notice is its own process being paused (GC,
// SIGSTOP): carry the token into every write, so a stale leader is fenced.
type Elector struct {
	client *Client
	cfg    ElectorConfig
	log    *slog.Logger

	mu       sync.Mutex
	token    uint64 // 0 when not leading
	proof    string // the proof of the grant we lead with
	leaseJob string // the job the grant is on: Job, or a slot's job
	slot     uint32 // the slot of a counted grant
	deadline time.Time
	warned   warnings

	// The value we publish (ElectorConfig.Value, then SetValue's), its
	// generation (SetValue counts it up), and the generation the server is
	// known to hold for our grant: while the two differ, renewals carry
	// the value; once one carrying it succeeded they stop (an unset value
	// keeps it on the server).
	value          []byte
	valueGen       uint64
	valuePublished uint64

	// The current term's leader context, and the callbacks of the last
	// term (each term's callbacks wait for the previous term's).
	term       context.Context
	cancelTerm context.CancelFunc
	termDone   chan struct{}

	// transfers carries Transfer's requests to the goroutine that leads,
	// which makes them between its renewals: a renewal never races with a
	// transfer.
	transfers chan transferRequest

	// OnNewLeader's state: the last token reported, and the reports not
	// yet delivered (in order; newLeaders wakes the goroutine that
	// delivers them).
	leaderToken uint64
	leaders     []observedLeader
	newLeaders  chan struct{}
}

type observedLeader struct {
	holder string
	token  uint64
	value  []byte
}

// NewElector checks cfg and makes an Elector; call Run to campaign.
func NewElector(client *Client, cfg ElectorConfig) (*Elector, error) {
	if cfg.Job == "" {
		return nil, errors.New("leasehold: ElectorConfig.Job is required")
	}
	if cfg.TTL <= 0 {
		return nil, errors.New("leasehold: ElectorConfig.TTL must be positive")
	}
	if cfg.Holder == "" {
		if cfg.Name == "" {
			return nil, errors.New("leasehold: ElectorConfig.Name or Holder is required")
		}
		cfg.Holder = electorHolder(cfg.Name)
	}
	if err := checkValue(cfg.Value); err != nil {
		return nil, err
	}
	if cfg.Slots >= 2 && cfg.Callbacks.OnNewLeader != nil {
		return nil, errors.New("leasehold: ElectorConfig.Slots and Callbacks.OnNewLeader do not go together: " +
			"a counted lease has several leaders at once; observe each slot's job instead")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("job", cfg.Job)
	return &Elector{client: client, cfg: cfg, log: log, newLeaders: make(chan struct{}, 1),
		transfers: make(chan transferRequest), value: bytes.Clone(cfg.Value)}, nil
}

// checkValue refuses a value over MaxValueBytes, as the server would
// (INVALID_ARGUMENT, field "value"), before it can cost a leader its
// lease: a renewal refused for good steps down.
func checkValue(v []byte) error {
	if len(v) > MaxValueBytes {
		return &InvalidArgumentError{Field: "value",
			Message: fmt.Sprintf("value: is %d bytes, the limit is %d", len(v), MaxValueBytes)}
	}
	return nil
}

// SetValue changes the value we publish (ElectorConfig.Value): it goes
// with our next renewal while we lead (TTL/3 at most from now), or with
// our next Acquire when we do not, and once a renewal carrying it has
// succeeded it is not sent again (a renewal without a value keeps it on
// the server). Watchers then see an EventValueChanged; OnNewLeader is not
// called (the leader is the same). It returns at once. nil or empty
// clears the value. A value over MaxValueBytes is an
// *InvalidArgumentError (Field "value") and changes nothing.
func (e *Elector) SetValue(v []byte) error {
	if err := checkValue(v); err != nil {
		return err
	}
	e.mu.Lock()
	e.value = bytes.Clone(v)
	e.valueGen++
	e.mu.Unlock()
	return nil
}

// publishing is the value to send now and its generation, and whether the
// server may not hold it yet for our grant (a renewal must carry it).
func (e *Elector) publishing() (value []byte, gen uint64, pending bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.value, e.valueGen, e.valueGen != e.valuePublished
}

// published notes that the server holds the value of generation gen for
// our grant.
func (e *Elector) published(gen uint64) {
	e.mu.Lock()
	e.valuePublished = gen
	e.mu.Unlock()
}

// Leader asks the server who leads the job now (GetLease): the lease's
// Holder ("" when the job is free), Token and Value, the value the leader
// published (where to reach it). A follower routes to Value; it is
// advisory: the token fences, not the value. For a counted lease
// (ElectorConfig.Slots) the job's own lease is the line's turn, held for
// the first waiter: ask Client.GetLease about a slot's job,
// "{job}#{k}", for its holder.
func (e *Elector) Leader(ctx context.Context) (Lease, error) {
	return e.client.GetLease(ctx, e.cfg.Job)
}

// Holder returns our holder identity.
func (e *Elector) Holder() string { return e.cfg.Holder }

// Token returns the token we lead with, and whether we lead. It checks our
// own deadline too, so it reports false on time even if the elector's
// goroutine has not caught up yet.
func (e *Elector) Token() (uint64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.token != 0 && time.Now().Before(e.deadline) {
		return e.token, true
	}
	return 0, false
}

// Proof returns the proof of the grant we lead with (Lease.Proof: the
// server's signed statement that it issued our token), and whether we
// lead, as Token does. The proof is "" when the server signs nothing.
// Storage that leasehold does not own verifies it with VerifyProof; it
// proves that the token was issued, not that we still lead.
func (e *Elector) Proof() (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.token != 0 && time.Now().Before(e.deadline) {
		return e.proof, true
	}
	return "", false
}

// LeaseJob returns the job our lease is on, and whether we lead (as Token
// says): the elector's job, or for a counted lease (ElectorConfig.Slots)
// the slot's job, "{job}#{slot}", which writes fenced by our token must
// name. In OnStartedLeading, LeaseJobFrom(ctx) names the job of that
// callback's token even if leadership has moved on since.
func (e *Elector) LeaseJob() (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.token != 0 && time.Now().Before(e.deadline) {
		return e.leaseJob, true
	}
	return "", false
}

// Slot returns the slot we lead in, and true, while we lead a counted
// lease (ElectorConfig.Slots); 0 and false when we do not lead, or the
// lease is not counted.
func (e *Elector) Slot() (uint32, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.token != 0 && time.Now().Before(e.deadline) && e.leaseJob != e.cfg.Job {
		return e.slot, true
	}
	return 0, false
}

// termJob is the key of the leader context's value: the job of the
// term's lease.
type termJob struct{}

// LeaseJobFrom returns the job the lease of a leadership is on, from its
// leader context (OnStartedLeading's ctx, or one derived from it): the
// elector's job, or for a counted lease the slot's job, "{job}#{slot}".
// It names the job of that term's token, even once the term has ended
// (writes with the token are then fenced). false for any other ctx.
func LeaseJobFrom(ctx context.Context) (string, bool) {
	job, ok := ctx.Value(termJob{}).(string)
	return job, ok
}

// leaseJobOf is the job a grant of e's campaign is on: a counted grant's
// slot job (Lease.Job), else the elector's job.
func (e *Elector) leaseJobOf(grant Lease) string {
	if grant.Counted() && grant.Job != "" {
		return grant.Job
	}
	return e.cfg.Job
}

// IsLeader reports whether we lead now.
func (e *Elector) IsLeader() bool {
	_, ok := e.Token()
	return ok
}

type timing struct{ campaignWait, every time.Duration }

func timingFor(ttl time.Duration) timing {
	clamp := func(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }
	return timing{
		campaignWait: clamp(ttl*3, time.Second, 30*time.Second),
		every:        ttl / 3,
	}
}

// warn logs a retry warning, at most one every warnEvery (5 s) with the
// count of those suppressed since; every failed attempt is logged at debug
// level.
func (e *Elector) warn(msg string, args ...any) {
	e.log.Debug(msg, args...)
	e.mu.Lock()
	n, ok := e.warned.allow(time.Now())
	e.mu.Unlock()
	if ok {
		e.log.Warn(msg, append(args, "suppressed", n)...)
	}
}

// refused reports whether err is one retrying cannot fix, on which an
// elector stops campaigning: the server refused the request itself (a TTL
// out of its range, a job name too long) or the caller (its policy).
func refused(err error) bool {
	return errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrUnauthenticated) ||
		errors.Is(err, ErrPermissionDenied)
}

// Run campaigns until ctx is done, then releases the lease if held (bounded
// by our deadline, at least 200 ms) and returns nil once the callbacks have
// returned. Run it once.
//
// A campaign the server refuses with an error retrying cannot fix
// (ErrInvalidArgument, such as a TTL over its --max-ttl or a job over
// --max-name-bytes; ErrUnauthenticated; ErrPermissionDenied) is not
// retried: Run returns that error at once.
//
// With Callbacks.OnNewLeader set, Run also watches the job while it runs,
// and returns only once that watch has ended and OnNewLeader has returned.
func (e *Elector) Run(ctx context.Context) error {
	t := timingFor(e.cfg.TTL)
	retry := campaignBackoff(e.cfg.TTL)
	if e.cfg.Callbacks.OnNewLeader != nil {
		wctx, stopWatching := context.WithCancel(ctx)
		watched := e.startObserving(wctx)
		defer func() { stopWatching(); <-watched }()
	}
	defer e.waitCallbacks()
	for ctx.Err() == nil {
		sent := time.Now()
		value, gen, _ := e.publishing()
		actx, cancel := context.WithTimeout(ctx, t.campaignWait+e.cfg.TTL)
		a, err := e.client.Acquire(actx, e.cfg.Job, e.cfg.Holder, e.cfg.TTL, t.campaignWait,
			BindToStream(e.cfg.BindToStream), Preferred(e.cfg.Preferred), AcquireValue(value),
			AcquireSlots(e.cfg.Slots))
		timedOut := actx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			e.releaseIfGranted()
			return nil
		}
		if err != nil {
			if timedOut {
				e.warn("campaign: acquire timed out")
				continue
			}
			if refused(err) {
				e.log.Error("campaign refused; not campaigning again", "error", err)
				return err
			}
			e.warn("campaign: acquire failed; retrying", "error", err)
			if !sleepCtx(ctx, retry.next()) {
				return nil
			}
			continue
		}
		retry.reset()
		if !a.Acquired {
			e.observe(a.Lease.Holder, a.Lease.Token, a.Lease.Value)
			continue
		}
		// The grant holds the value this Acquire carried; one SetValue
		// gave since goes with the first renewal.
		e.published(gen)
		anchor, ok := e.anchor(ctx, e.leaseJobOf(a.Lease), a.Lease.Token, sent)
		if !ok {
			continue
		}
		if e.lead(ctx, a.Lease, anchor) {
			return nil
		}
	}
	return nil
}

// anchor is the instant our lease's TTL may be counted from: at or before
// the server granted or last renewed it. A waiting Acquire may have been
// granted long after it was sent; then a Renew sent now confirms the lease
// and gives a fresh anchor. job is the job the grant is on.
func (e *Elector) anchor(ctx context.Context, job string, token uint64, sent time.Time) (time.Time, bool) {
	if time.Since(sent) < e.cfg.TTL/10 {
		return sent, true
	}
	at := time.Now()
	rctx, cancel := context.WithTimeout(ctx, e.cfg.TTL/2)
	defer cancel()
	if _, err := e.client.Renew(rctx, job, e.cfg.Holder, token, e.cfg.TTL); err != nil {
		e.log.Warn("granted, but the confirming renew failed", "token", token, "error", err)
		return time.Time{}, false
	}
	return at, true
}

// lead leads with the grant (its token, proof and value) until the lease
// is lost or handed over (false) or ctx is done (releases; true). Every
// call about the lease names the job it is on: a counted lease's slot job.
func (e *Elector) lead(ctx context.Context, grant Lease, sent time.Time) bool {
	token := grant.Token
	job := e.leaseJobOf(grant)
	t := timingFor(e.cfg.TTL)
	retry := renewBackoff(e.cfg.TTL)
	deadline := sent.Add(e.cfg.TTL)
	e.setLeader(grant, deadline)
	next := sent.Add(t.every)
	for {
		wake := next
		if deadline.Before(wake) {
			wake = deadline
		}
		switch e.sleepLeading(ctx, job, token, wake, deadline) {
		case stopped:
			return e.resign(job, token, deadline)
		case handedOver:
			return false
		}
		now := time.Now()
		if !now.Before(deadline) {
			e.log.Warn("reached the deadline without a renewal", "token", token)
			break
		}
		// A value SetValue gave goes with every renewal until one succeeds.
		value, gen, pending := e.publishing()
		var opts []RenewOption
		if pending {
			opts = append(opts, RenewValue(value))
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		r, err := e.client.RenewLease(rctx, job, e.cfg.Holder, token, e.cfg.TTL, opts...)
		cancel()
		if ctx.Err() != nil {
			return e.resign(job, token, deadline)
		}
		if err == nil {
			if pending {
				e.published(gen)
			}
			deadline = now.Add(e.cfg.TTL)
			next = now.Add(t.every)
			retry.reset()
			e.mu.Lock()
			if e.token == token {
				e.deadline = deadline
				// The same proof, unless the server signed the grant again
				// (its key rotated out).
				e.proof = r.Lease.Proof
			}
			e.mu.Unlock()
			if r.SuccessorWaiting && e.cfg.YieldToPreferred {
				// Our safe point: just renewed, nothing in flight.
				_, ended, err := e.handOver(ctx, job, token, "", deadline)
				switch {
				case ended:
					return false
				case ctx.Err() != nil:
					return e.resign(job, token, deadline)
				case err != nil:
					// The candidate left (ErrNoSuccessor), or the call
					// failed: still ours; the next renewal says again.
					e.log.Debug("hand-over to a preferred candidate failed", "token", token, "error", err)
				}
			}
			continue
		}
		if errors.Is(err, ErrLeaseLost) || refused(err) {
			e.log.Warn("lease lost", "token", token, "error", err)
			break
		}
		e.warn("renew failed; retrying", "token", token, "error", err)
		next = time.Now().Add(retry.nextBefore(deadline))
	}
	e.setFollower(token)
	return false
}

// How sleepLeading ended.
const (
	woke       = iota // the time came
	stopped           // Run's ctx is done
	handedOver        // a Transfer ended this leadership
)

// sleepLeading waits until wake while leading with token on job, making
// the transfers Transfer asks for meanwhile.
func (e *Elector) sleepLeading(ctx context.Context, job string, token uint64, wake, deadline time.Time) int {
	timer := time.NewTimer(time.Until(wake))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return stopped
		case <-timer.C:
			return woke
		case req := <-e.transfers:
			if e.transfer(req, job, token, deadline) {
				return handedOver
			}
		}
	}
}

// transferRequest is one call of Transfer, for the leadership with token.
type transferRequest struct {
	ctx   context.Context
	token uint64
	to    string
	reply chan transferResult // buffered: the leading goroutine never blocks
}

type transferResult struct {
	lease Lease
	err   error
}

// Transfer hands our leadership to a waiting holder: the first in line
// when to is "", else the waiting holder to (an Elector's Holder()). It
// calls TransferLease with the token we lead with (the TTL unchanged):
// the successor is granted the next token at once, and we step down as
// on a loss (the leader context is cancelled, OnStoppedLeading follows),
// then campaign again, our waiting Acquire queued behind the successor,
// unless Run is being stopped. It returns the successor's lease.
//
// With no such waiter it returns a *NoSuccessorError (ErrNoSuccessor) and
// we go on leading. If the lease was lost meanwhile it returns a
// *LeaseLostError (ErrLeaseLost) and we step down. Any other error (the
// server unreachable, ctx done) leaves us leading: if the transfer was
// made nevertheless, the next renewal finds the lease lost. When we do
// not lead, it returns ErrNotLeader without calling the server.
//
// The transfer is made by the goroutine that runs Run, between renewals,
// so a renewal of the old token never races with it: the end of the
// leadership is reported once.
func (e *Elector) Transfer(ctx context.Context, to string) (Lease, error) {
	e.mu.Lock()
	token, term := e.token, e.term
	leading := token != 0 && time.Now().Before(e.deadline)
	e.mu.Unlock()
	if !leading {
		return Lease{}, ErrNotLeader
	}
	req := transferRequest{ctx: ctx, token: token, to: to, reply: make(chan transferResult, 1)}
	select {
	case e.transfers <- req:
	case <-term.Done():
		return Lease{}, ErrNotLeader
	case <-ctx.Done():
		return Lease{}, &ContextError{Err: ctx.Err()}
	}
	r := <-req.reply
	return r.lease, r.err
}

// transfer makes req while leading with token on job until deadline;
// true when the leadership ended (handed over, or found lost).
func (e *Elector) transfer(req transferRequest, job string, token uint64, deadline time.Time) bool {
	if req.token != token || !time.Now().Before(deadline) {
		req.reply <- transferResult{err: ErrNotLeader}
		return false
	}
	l, ended, err := e.handOver(req.ctx, job, token, req.to, deadline)
	req.reply <- transferResult{lease: l, err: err}
	return ended
}

// handOver hands the leadership with token (until deadline at the
// latest) to the waiting holder to, or to the first in line when to is
// "": the path of both Transfer and YieldToPreferred, run by the goroutine
// that leads. ended is true when the leadership ended: handed over (the
// successor's lease is returned), or found lost (ErrLeaseLost); either is
// reported as a loss. Otherwise (ErrNoSuccessor, a failed call) we still
// lead.
func (e *Elector) handOver(ctx context.Context, job string, token uint64, to string, deadline time.Time) (l Lease, ended bool, err error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	l, err = e.client.TransferLease(ctx, job, e.cfg.Holder, token, to, 0)
	cancel()
	switch {
	case err == nil:
		e.log.Info("handed over", "token", token, "to", l.Holder, "successor_token", l.Token)
		e.setFollower(token)
		e.observe(l.Holder, l.Token, l.Value)
		return l, true, nil
	case errors.Is(err, ErrLeaseLost):
		e.log.Warn("lease lost", "token", token, "error", err)
		e.setFollower(token)
		return Lease{}, true, err
	default:
		return Lease{}, false, err
	}
}

// resign steps down and releases the lease on job, bounded: past our
// deadline the lease runs out on its own.
func (e *Elector) resign(job string, token uint64, deadline time.Time) bool {
	e.setFollower(token)
	bound := max(time.Until(deadline), 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := e.client.Release(ctx, job, e.cfg.Holder, token); err != nil {
		e.log.Warn("release on resign failed", "token", token, "error", err)
	}
	return true
}

// releaseIfGranted: stopped while an Acquire was in flight, which the
// server may have granted just before the cancel. Best effort, briefly:
// release the lease if it is ours, rather than leave it to run out. A
// counted grant is a slot's job, "{job}#{k}" (the job's own lease, the
// line's turn, the server ends with the cancelled call).
func (e *Elector) releaseIfGranted() {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if e.cfg.Slots >= 2 {
		if l, found, err := e.client.slotHeldBy(ctx, e.cfg.Job, e.cfg.Holder); err == nil && found {
			_ = e.client.Release(ctx, l.Job, e.cfg.Holder, l.Token)
		}
		return
	}
	if l, err := e.client.GetLease(ctx, e.cfg.Job); err == nil && l.Holder == e.cfg.Holder {
		_ = e.client.Release(ctx, e.cfg.Job, e.cfg.Holder, l.Token)
	}
}

func (e *Elector) setLeader(grant Lease, deadline time.Time) {
	token := grant.Token
	job := e.leaseJobOf(grant)
	termCtx, cancel := context.WithCancel(context.WithValue(context.Background(), termJob{}, job))
	e.mu.Lock()
	e.token = token
	e.proof = grant.Proof
	e.leaseJob = job
	e.slot = grant.Slot
	e.deadline = deadline
	e.term = termCtx
	e.cancelTerm = cancel
	prev := e.termDone
	done := make(chan struct{})
	e.termDone = done
	e.mu.Unlock()
	if job != e.cfg.Job {
		e.log.Info("elected", "token", token, "lease_job", job, "slot", grant.Slot)
	} else {
		e.log.Info("elected", "token", token)
	}
	e.observe(e.cfg.Holder, token, grant.Value)
	cb := e.cfg.Callbacks
	go func() {
		defer close(done)
		if prev != nil {
			<-prev // the previous term's callbacks come first
		}
		if cb.OnStartedLeading != nil {
			cb.OnStartedLeading(termCtx, token)
		}
		<-termCtx.Done()
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading(token)
		}
	}()
}

func (e *Elector) setFollower(token uint64) {
	e.mu.Lock()
	if e.token != token {
		e.mu.Unlock()
		return
	}
	e.token = 0
	e.proof = ""
	cancel := e.cancelTerm
	e.cancelTerm = nil
	e.mu.Unlock()
	e.log.Info("stepped down", "token", token)
	if cancel != nil {
		cancel()
	}
}

func (e *Elector) waitCallbacks() {
	e.mu.Lock()
	done := e.termDone
	e.mu.Unlock()
	if done != nil {
		<-done
	}
}

// observe notes holder leading with token, having published value:
// OnNewLeader is called if token is above the last one reported (a value
// changed under the same token is no new leader). A no-op without
// OnNewLeader.
func (e *Elector) observe(holder string, token uint64, value []byte) {
	if e.cfg.Callbacks.OnNewLeader == nil || holder == "" || token == 0 {
		return
	}
	e.mu.Lock()
	if token <= e.leaderToken {
		e.mu.Unlock()
		return
	}
	e.leaderToken = token
	e.leaders = append(e.leaders, observedLeader{holder, token, value})
	e.mu.Unlock()
	select {
	case e.newLeaders <- struct{}{}:
	default:
	}
}

// startObserving starts watching the job and delivering OnNewLeader until
// ctx is done; the returned channel is closed once both have ended.
func (e *Elector) startObserving(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); e.watchLeaders(ctx) }()
	go func() { defer wg.Done(); e.deliverLeaders(ctx) }()
	go func() { wg.Wait(); close(done) }()
	return done
}

// watchLeaders follows the job's lease on a WatchLease stream, opening it
// again with the campaign's backoff when it breaks (the first event of a
// new stream is the current lease, so nothing is missed for long). A watch
// the server refuses for good (ErrInvalidArgument, ErrUnauthenticated,
// ErrPermissionDenied) is not opened again: OnNewLeader then hears only
// what the campaign learns.
func (e *Elector) watchLeaders(ctx context.Context) {
	retry := campaignBackoff(e.cfg.TTL)
	for ctx.Err() == nil {
		w, err := e.client.Watch(ctx, e.cfg.Job)
		if err == nil {
			for {
				ev, rerr := w.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				retry.reset()
				e.observe(ev.Lease.Holder, ev.Lease.Token, ev.Lease.Value)
			}
			w.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if refused(err) {
			e.log.Warn("watch refused; OnNewLeader hears only what the campaign learns", "error", err)
			return
		}
		e.warn("watch ended; watching again", "error", err)
		if !sleepCtx(ctx, retry.next()) {
			return
		}
	}
}

// deliverLeaders calls OnNewLeader for each report, in order, until ctx is
// done.
func (e *Elector) deliverLeaders(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.newLeaders:
		}
		for {
			e.mu.Lock()
			if len(e.leaders) == 0 || ctx.Err() != nil {
				e.mu.Unlock()
				break
			}
			l := e.leaders[0]
			e.leaders = e.leaders[1:]
			e.mu.Unlock()
			e.cfg.Callbacks.OnNewLeader(l.holder, l.token, l.value)
		}
	}
}

// sleepCtx sleeps for d; false if ctx was done first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// String describes the elector, for logs.
func (e *Elector) String() string {
	return fmt.Sprintf("Elector(job=%s holder=%s)", e.cfg.Job, e.cfg.Holder)
}
