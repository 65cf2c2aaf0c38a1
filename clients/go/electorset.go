package leasehold

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// ElectorSetCallbacks are called as the set's leadership of each job
// changes.
type ElectorSetCallbacks struct {
	// OnStartedLeading runs in its own goroutine when the set becomes the
	// leader of job with token. ctx is cancelled the moment it stops
	// leading that job (lost, the job's own deadline passed, Resign(job),
	// or Run's context done): return promptly then. Carry token into every
	// write of the job.
	OnStartedLeading func(ctx context.Context, job string, token uint64)
	// OnStoppedLeading is called when the leadership of job with token
	// ended, after OnStartedLeading for it has returned. A job's terms
	// are reported in order (each term's callbacks start after the
	// previous term's of the same job have returned); Run returns only
	// after every job's have.
	OnStoppedLeading func(job string, token uint64)
}

// ElectorSetConfig configures an ElectorSet.
type ElectorSetConfig struct {
	// Name for the set's holder identity Name@<uuid>, with a UUID made for
	// this set. Required unless Holder is set.
	Name string
	// Holder overrides the holder identity.
	Holder string
	// TTL of every lease; the set renews them every TTL/3. Required.
	TTL time.Duration
	// Callbacks, all optional.
	Callbacks ElectorSetCallbacks
	// Logger for warnings; slog.Default() when nil.
	Logger *slog.Logger
	// BindToStream binds every lease to the client's connection: each
	// campaign's Acquire and the KeepAlive stream ask for it (see
	// ElectorConfig.BindToStream for what it trades).
	BindToStream bool
	// Preferred campaigns as a preferred candidate for every job (see
	// ElectorConfig.Preferred). The set never yields on its own: hand a
	// job over with Client.TransferLease.
	Preferred bool
}

// ErrSetStopped: Campaign on an ElectorSet whose Run has returned (or is
// returning), or a second Run.
var ErrSetStopped = errors.New("leasehold: the elector set has stopped")

// Leadership is one job an ElectorSet leads.
type Leadership struct {
	Job   string
	Token uint64
	// Deadline is the set's own deadline for the job's lease: the instant
	// its last successful grant or renewal was sent, plus the TTL. The set
	// steps down from the job by then, whether or not the server can be
	// reached.
	Deadline time.Time
}

// ElectorSet campaigns for many jobs as one holder, and renews every lease
// it holds together over one KeepAlive stream: every TTL/3 one message
// (split at 1000 renewals) carries a renewal for each, and its answer has
// a result per lease. A worker that leads a hundred jobs sends one
// message per period instead of a hundred calls.
//
// Each job has its own campaign, as an Elector's: a waiting Acquire (a
// release hands over at once), with the Elector's backoff; a grant that
// came long after its Acquire was sent is confirmed with a Renew first.
// Each job steps down no later than its own deadline (see Leadership),
// even when the stream is stuck or the server frozen; a renewal answered
// LEASE_LOST (or UNKNOWN_TOKEN) steps that job alone down, and its
// campaign starts again. A broken stream is opened again with backoff
// while the deadlines keep running. A campaign the server refuses with an
// error retrying cannot fix (ErrInvalidArgument, ErrUnauthenticated,
// ErrPermissionDenied) stops that job alone: Err(job) has the error.
//
// The set is one holder, Name@uuid with a UUID made for it: two sets (or a
// set and an Elector) in one process are two holders.
//
//	set, _ := leasehold.NewElectorSet(client, leasehold.ElectorSetConfig{
//		Name: "sync-worker", TTL: 10 * time.Second,
//		Callbacks: leasehold.ElectorSetCallbacks{
//			OnStartedLeading: func(ctx context.Context, job string, token uint64) { syncRegion(ctx, job, token) },
//		},
//	})
//	for _, job := range []string{"sync_eu", "sync_us", "sync_ap"} {
//		set.Campaign(job)
//	}
//	err := set.Run(ctx) // until ctx is done; then releases every lease held
type ElectorSet struct {
	client *Client
	cfg    ElectorSetConfig
	log    *slog.Logger

	mu       sync.Mutex
	runCtx   context.Context // set by Run
	started  bool
	stopping bool
	jobs     map[string]*setJob
	held     map[string]*setHeld
	warned   warnings
	// wake tells the renewer that a lease joined.
	wake      chan struct{}
	campaigns sync.WaitGroup
	// terms counts the callbacks' goroutines still running.
	terms sync.WaitGroup
}

// setJob is one job's campaign.
type setJob struct {
	cancel context.CancelFunc // stops the campaign; nil before Run
	done   chan struct{}      // closed once the campaign has ended
	err    error              // what stopped it for good
	// termDone is closed once the last term's callbacks have returned.
	termDone chan struct{}
}

// setHeld is one lease the set holds.
type setHeld struct {
	token    uint64
	proof    string
	deadline time.Time
	// lost is closed on the step-down: the campaign starts again.
	lost       chan struct{}
	cancelTerm context.CancelFunc
}

// NewElectorSet checks cfg and makes an ElectorSet; add jobs with
// Campaign, and call Run.
func NewElectorSet(client *Client, cfg ElectorSetConfig) (*ElectorSet, error) {
	if cfg.TTL <= 0 {
		return nil, errors.New("leasehold: ElectorSetConfig.TTL must be positive")
	}
	if cfg.Holder == "" {
		if cfg.Name == "" {
			return nil, errors.New("leasehold: ElectorSetConfig.Name or Holder is required")
		}
		cfg.Holder = electorHolder(cfg.Name)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &ElectorSet{client: client, cfg: cfg, log: log.With("holder", cfg.Holder),
		jobs: map[string]*setJob{}, held: map[string]*setHeld{}, wake: make(chan struct{}, 1)}, nil
}

// Holder returns the set's holder identity.
func (s *ElectorSet) Holder() string { return s.cfg.Holder }

// Campaign adds job to the set: its campaign starts now if Run is
// running, else when Run starts. Campaigning for a job already in the set
// does nothing. An empty job is refused, and so is any job once Run has
// returned (ErrSetStopped).
func (s *ElectorSet) Campaign(job string) error {
	if job == "" {
		return &InvalidArgumentError{Message: "ElectorSet.Campaign: the job is required", Field: "job"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return ErrSetStopped
	}
	if _, ok := s.jobs[job]; ok {
		return nil
	}
	j := &setJob{done: make(chan struct{})}
	s.jobs[job] = j
	if s.started {
		s.startCampaign(job, j)
	}
	return nil
}

// startCampaign starts j's campaign under Run's context. s.mu is held.
func (s *ElectorSet) startCampaign(job string, j *setJob) {
	ctx, cancel := context.WithCancel(s.runCtx)
	j.cancel = cancel
	s.campaigns.Add(1)
	go func() {
		defer s.campaigns.Done()
		defer close(j.done)
		s.campaign(ctx, job, j)
	}()
}

// Resign stops campaigning for job and releases its lease if the set
// holds it (bounded by its deadline, at least 200 ms): the first waiter
// is granted the job at once. The job's leader context is cancelled and
// OnStoppedLeading follows. It returns once the lease is released; call
// Campaign to campaign for the job again. A job not in the set is
// ignored.
func (s *ElectorSet) Resign(job string) {
	s.mu.Lock()
	j, ok := s.jobs[job]
	if ok {
		delete(s.jobs, job)
	}
	s.mu.Unlock()
	if !ok {
		return
	}
	if j.cancel != nil {
		j.cancel()
		<-j.done
	}
	s.release(job)
}

// Err returns the error that stopped job's campaign for good (one
// retrying cannot fix), or nil.
func (s *ElectorSet) Err(job string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.jobs[job]; ok {
		return j.err
	}
	return nil
}

// Token returns the token the set leads job with, and whether it leads
// it. It checks the job's own deadline too, so it reports false on time
// even if the set's goroutines have not caught up yet.
func (s *ElectorSet) Token(job string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[job]; ok && time.Now().Before(h.deadline) {
		return h.token, true
	}
	return 0, false
}

// IsLeading reports whether the set leads job now.
func (s *ElectorSet) IsLeading(job string) bool {
	_, ok := s.Token(job)
	return ok
}

// Proof returns the proof of the grant the set leads job with (see
// Elector.Proof), and whether it leads it.
func (s *ElectorSet) Proof(job string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[job]; ok && time.Now().Before(h.deadline) {
		return h.proof, true
	}
	return "", false
}

// Leading returns every job the set leads now, ordered by job.
func (s *ElectorSet) Leading() []Leadership {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []Leadership
	for job, h := range s.held {
		if now.Before(h.deadline) {
			out = append(out, Leadership{Job: job, Token: h.token, Deadline: h.deadline})
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Job < out[k].Job })
	return out
}

// Run campaigns for every job of the set, and renews the leases it holds,
// until ctx is done; then it stops every campaign, releases every lease
// held (each bounded by its deadline, at least 200 ms) and returns nil once
// every callback has returned. Run it once (a second Run returns
// ErrSetStopped). A job's campaign that the server refuses for good stops
// that job alone (Err).
func (s *ElectorSet) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.stopping {
		s.mu.Unlock()
		return ErrSetStopped
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.runCtx = runCtx
	s.started = true
	for job, j := range s.jobs {
		s.startCampaign(job, j)
	}
	s.mu.Unlock()

	renewed := make(chan struct{})
	go func() { defer close(renewed); s.renewLoop(runCtx) }()
	<-ctx.Done()

	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	cancel()
	s.campaigns.Wait()
	<-renewed
	s.mu.Lock()
	var jobs []string
	for job := range s.held {
		jobs = append(jobs, job)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, job := range jobs {
		wg.Add(1)
		go func() { defer wg.Done(); s.release(job) }()
	}
	wg.Wait()
	s.terms.Wait()
	return nil
}

func (s *ElectorSet) warn(msg string, args ...any) {
	s.log.Debug(msg, args...)
	s.mu.Lock()
	n, ok := s.warned.allow(time.Now())
	s.mu.Unlock()
	if ok {
		s.log.Warn(msg, append(args, "suppressed", n)...)
	}
}

// campaign campaigns for job until ctx is done: acquire (waiting), lead
// until the lease is lost, start again.
func (s *ElectorSet) campaign(ctx context.Context, job string, j *setJob) {
	ttl := s.cfg.TTL
	t := timingFor(ttl)
	retry := campaignBackoff(ttl)
	for ctx.Err() == nil {
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, t.campaignWait+ttl)
		a, err := s.client.Acquire(actx, job, s.cfg.Holder, ttl, t.campaignWait,
			BindToStream(s.cfg.BindToStream), Preferred(s.cfg.Preferred))
		timedOut := actx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			s.releaseIfGranted(job)
			return
		}
		if err != nil {
			if timedOut {
				s.warn("campaign: acquire timed out", "job", job)
				continue
			}
			if refused(err) {
				s.log.Error("campaign refused; not campaigning again for this job", "job", job, "error", err)
				s.mu.Lock()
				j.err = err
				s.mu.Unlock()
				return
			}
			s.warn("campaign: acquire failed; retrying", "job", job, "error", err)
			if !sleepCtx(ctx, retry.next()) {
				return
			}
			continue
		}
		retry.reset()
		if !a.Acquired {
			continue
		}
		anchor, ok := s.anchor(ctx, job, a.Lease.Token, sent)
		if !ok || !time.Now().Before(anchor.Add(ttl)) {
			continue
		}
		lost := s.lead(job, j, a.Lease.Token, a.Lease.Proof, anchor)
		select {
		case <-ctx.Done():
			return // Resign or Run releases it
		case <-lost:
		}
	}
}

// anchor is the instant a fresh grant's TTL may be counted from (see
// Elector.anchor): when the Acquire was sent if it came back quickly, else
// when a confirming Renew was sent.
func (s *ElectorSet) anchor(ctx context.Context, job string, token uint64, sent time.Time) (time.Time, bool) {
	ttl := s.cfg.TTL
	if time.Since(sent) < ttl/10 {
		return sent, true
	}
	at := time.Now()
	rctx, cancel := context.WithTimeout(ctx, ttl/2)
	defer cancel()
	if _, err := s.client.Renew(rctx, job, s.cfg.Holder, token, ttl); err != nil {
		s.log.Warn("granted, but the confirming renew failed", "job", job, "token", token, "error", err)
		return time.Time{}, false
	}
	return at, true
}

// lead records that we lead job with token until anchor+TTL, starts its
// callbacks and wakes the renewer; the returned channel is closed on the
// step-down.
func (s *ElectorSet) lead(job string, j *setJob, token uint64, proof string, anchor time.Time) <-chan struct{} {
	termCtx, cancel := context.WithCancel(context.Background())
	h := &setHeld{token: token, proof: proof, deadline: anchor.Add(s.cfg.TTL), lost: make(chan struct{}), cancelTerm: cancel}
	s.mu.Lock()
	s.held[job] = h
	prev := j.termDone
	done := make(chan struct{})
	j.termDone = done
	s.mu.Unlock()
	s.log.Info("elected", "job", job, "token", token)
	cb := s.cfg.Callbacks
	s.terms.Add(1)
	go func() {
		defer s.terms.Done()
		defer close(done)
		if prev != nil {
			<-prev // the job's previous term's callbacks come first
		}
		if cb.OnStartedLeading != nil {
			cb.OnStartedLeading(termCtx, job, token)
		}
		<-termCtx.Done()
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading(job, token)
		}
	}()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return h.lost
}

// stepDown ends our leadership of job with token, if we still have it.
func (s *ElectorSet) stepDown(job string, token uint64, why string, args ...any) *setHeld {
	s.mu.Lock()
	h, ok := s.held[job]
	if !ok || h.token != token {
		s.mu.Unlock()
		return nil
	}
	delete(s.held, job)
	s.mu.Unlock()
	s.log.Warn("stepped down: "+why, append([]any{"job", job, "token", token}, args...)...)
	h.cancelTerm()
	close(h.lost)
	return h
}

// release steps down from job and releases its lease, bounded by its
// deadline (at least 200 ms): past it the lease runs out on its own.
func (s *ElectorSet) release(job string) {
	s.mu.Lock()
	h, ok := s.held[job]
	if ok {
		delete(s.held, job)
	}
	s.mu.Unlock()
	if !ok {
		return
	}
	s.log.Info("stepped down: resigned", "job", job, "token", h.token)
	h.cancelTerm()
	close(h.lost)
	bound := max(time.Until(h.deadline), 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := s.client.Release(ctx, job, s.cfg.Holder, h.token); err != nil {
		s.log.Warn("release on resign failed", "job", job, "token", h.token, "error", err)
	}
}

// releaseIfGranted: stopped while an Acquire was in flight, which the
// server may have granted just before the cancel. Best effort, briefly.
func (s *ElectorSet) releaseIfGranted(job string) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if l, err := s.client.GetLease(ctx, job); err == nil && l.Holder == s.cfg.Holder {
		_ = s.client.Release(ctx, job, s.cfg.Holder, l.Token)
	}
}

// renewLoop renews every held lease every TTL/3 in one KeepAlive request,
// and steps down from any lease whose deadline passes or whose renewal is
// refused, until ctx is done.
func (s *ElectorSet) renewLoop(ctx context.Context) {
	ttl := s.cfg.TTL
	every := ttl / 3
	retry := renewBackoff(ttl)
	var stream *keepAliveConn
	defer func() { stream.close() }()
	var next time.Time // zero: nothing held, no schedule
	for {
		s.mu.Lock()
		var earliest time.Time
		for _, h := range s.held {
			if earliest.IsZero() || h.deadline.Before(earliest) {
				earliest = h.deadline
			}
		}
		s.mu.Unlock()
		if earliest.IsZero() {
			next = time.Time{}
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			continue
		}
		if next.IsZero() {
			// The first lease's first renewal: TTL/3 after its anchor.
			next = earliest.Add(-ttl).Add(every)
		}
		wake := next
		if earliest.Before(wake) {
			wake = earliest
		}
		timer := time.NewTimer(time.Until(wake))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-s.wake:
			timer.Stop()
			continue
		case <-timer.C:
		}
		// Our own deadlines first: no answer can extend them now.
		now := time.Now()
		type entry struct {
			job   string
			token uint64
		}
		var expired, batch []entry
		s.mu.Lock()
		for job, h := range s.held {
			if !now.Before(h.deadline) {
				expired = append(expired, entry{job, h.token})
			} else {
				batch = append(batch, entry{job, h.token})
			}
		}
		s.mu.Unlock()
		for _, e := range expired {
			s.stepDown(e.job, e.token, "the deadline passed without a renewal")
		}
		if now.Before(next) || len(batch) == 0 {
			continue
		}
		sort.Slice(batch, func(i, k int) bool { return batch[i].job < batch[k].job })
		renewals := make([]KeepAliveRenewal, len(batch))
		for i, e := range batch {
			renewals[i] = KeepAliveRenewal{Job: e.job, Holder: s.cfg.Holder, Token: e.token, TTL: ttl}
		}
		s.mu.Lock()
		earliest = time.Time{}
		for _, e := range batch {
			if h, ok := s.held[e.job]; ok && h.token == e.token && (earliest.IsZero() || h.deadline.Before(earliest)) {
				earliest = h.deadline
			}
		}
		s.mu.Unlock()
		if earliest.IsZero() {
			continue // resigned meanwhile
		}
		sent := time.Now()
		// Bounded by the earliest deadline: a stuck stream or a frozen
		// server holds the renewals up no longer than that, and the loop
		// then steps that job down and tries again for the others.
		bound := earliest
		if min10 := sent.Add(10 * time.Millisecond); bound.Before(min10) {
			bound = min10
		}
		rctx, cancel := context.WithDeadline(ctx, bound)
		if stream == nil {
			stream = s.openKeepAlive(ctx, rctx)
		}
		results, err := stream.renew(rctx, renewals)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.warn("keep-alive failed; retrying", "error", err)
			stream.close()
			stream = nil
			next = time.Now().Add(retry.nextBefore(earliest))
			continue
		}
		retry.reset()
		next = sent.Add(every)
		for i, r := range results {
			e := batch[i]
			if r.Kind == KeepAliveRenewed {
				s.mu.Lock()
				if h, ok := s.held[e.job]; ok && h.token == e.token {
					h.deadline = sent.Add(ttl)
				}
				s.mu.Unlock()
				continue
			}
			s.stepDown(e.job, e.token, "renewal refused", "outcome", r.Kind, "error", r.Err())
		}
	}
}

// keepAliveConn is the renewer's KeepAlive stream, or the error opening
// it failed with.
type keepAliveConn struct {
	ka     *KeepAlive
	err    error
	cancel context.CancelFunc
}

// openKeepAlive opens a KeepAlive stream that lives as long as ctx, but
// gives up opening it when bound is done: opening can wait for a
// connection that is not ready.
func (s *ElectorSet) openKeepAlive(ctx, bound context.Context) *keepAliveConn {
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(bound, cancel)
	ka, err := s.client.KeepAlive(sctx, KeepAliveBindToStream(s.cfg.BindToStream))
	if !stop() && err == nil {
		// bound ended as it opened: the stream is cancelled.
		err = ka.Close()
		if err == nil {
			err = &ContextError{Err: context.DeadlineExceeded}
		}
		ka = nil
	}
	return &keepAliveConn{ka: ka, err: err, cancel: cancel}
}

func (k *keepAliveConn) renew(ctx context.Context, renewals []KeepAliveRenewal) ([]KeepAliveResult, error) {
	if k.err != nil {
		return nil, k.err
	}
	return k.ka.Renew(ctx, renewals)
}

func (k *keepAliveConn) close() {
	if k == nil {
		return
	}
	if k.ka != nil {
		_ = k.ka.Close()
	}
	k.cancel()
}
