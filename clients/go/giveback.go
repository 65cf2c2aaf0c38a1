package leasehold

import (
	"context"
	"strings"
	"sync"
	"time"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// The give-back of a cancelled waiting Acquire: a grant made as the call
// was cancelled, whose reply was on its way, is released so that the job
// is not held for a TTL by a holder that never learned its token.
//
// Its caller never saw the reply, so the give-back reads the lease and
// releases it if it is the holder's. That is only safe if nothing told a
// caller of this client that the holder leads with that token:
//
//   - No call of this client for the (job, holder) started after the
//     cancelled one, and none is on its way (calls counts them): a retry
//     may have been granted the lease, and been told.
//   - The token is above every token a call of this client was told for
//     the pair: an earlier grant or renewal told its caller that it leads.
//   - The release is a give-back (ReleaseRequest.GiveBack): the server
//     keeps the lease if the holder asked again since the grant (an
//     Acquire or Renew from anywhere, racing with the give-back), whose
//     answer may have told it that it leads.

// settle is how long a give-back waits before it reads the lease: a grant
// made as the call was cancelled is made durable before it is sent.
const settle = 100 * time.Millisecond

type pairKey struct{ job, holder string }

// pair is one (job, holder) pair's calls through this client.
type pair struct {
	// newest is the number of the newest call started (see calls.next).
	newest uint64
	// inFlight counts the calls started and not ended.
	inFlight int
	// told is the highest token a call was told the holder holds; 0 for
	// none.
	told uint64
}

// calls holds every pair with a call on its way or a token told, for one
// client. A pair leaves when it has neither (a release through this
// client forgets what was told).
type calls struct {
	mu    sync.Mutex
	pairs map[pairKey]*pair
	next  uint64
}

func newCalls() *calls { return &calls{pairs: map[pairKey]*pair{}} }

// start registers an Acquire or Renew of (job, holder) as it starts. The
// caller ends it (asking.end) however the call ends.
func (c *calls) start(job, holder string) *asking {
	key := pairKey{job, holder}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	p := c.pairs[key]
	if p == nil {
		p = &pair{}
		c.pairs[key] = p
	}
	p.newest = c.next
	p.inFlight++
	return &asking{calls: c, key: key, n: c.next}
}

// released: the holder released the pair's lease, so nothing told is live
// now.
func (c *calls) released(job, holder string) {
	key := pairKey{job, holder}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pairs[key]; p != nil {
		p.told = 0
		if p.inFlight == 0 {
			delete(c.pairs, key)
		}
	}
}

// mayGiveBack reports whether the give-back of call n may release token:
// see the rules above.
func (c *calls) mayGiveBack(key pairKey, n, token uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pairs[key]
	return p == nil || (p.newest == n && p.inFlight == 0 && token > p.told)
}

// size is the number of pairs registered.
func (c *calls) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pairs)
}

// asking is one call on its way, until end.
type asking struct {
	calls *calls
	key   pairKey
	n     uint64
	ended bool
}

// told records that the call told its caller the holder leads with token.
func (a *asking) told(token uint64) {
	a.calls.mu.Lock()
	defer a.calls.mu.Unlock()
	if p := a.calls.pairs[a.key]; p != nil && token > p.told {
		p.told = token
	}
}

// end ends the call: answered, failed or cancelled. Only the first end
// counts.
func (a *asking) end() {
	a.calls.mu.Lock()
	defer a.calls.mu.Unlock()
	if a.ended {
		return
	}
	a.ended = true
	if p := a.calls.pairs[a.key]; p != nil {
		p.inFlight--
		if p.inFlight == 0 && p.told == 0 {
			delete(a.calls.pairs, a.key)
		}
	}
}

// giveBack is the clean-up of a cancelled waiting Acquire, call a, ended
// already: after the server has had time to decide, it gives the lease
// back if it is a's holder's and the rules above allow it. Best effort:
// errors are ignored. For a counted Acquire (counted), the grant would be
// a slot's job, "{job}#{k}", not the job: the job's own lease is then the
// line's turn, which the server ends itself with the cancelled call.
func (c *Client) giveBack(a *asking, counted bool) {
	time.Sleep(settle)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var l Lease
	var err error
	if counted {
		var found bool
		l, found, err = c.slotHeldBy(ctx, a.key.job, a.key.holder)
		if !found {
			return
		}
	} else {
		l, err = c.GetLease(ctx, a.key.job)
	}
	if err != nil || l.Holder != a.key.holder || !c.calls.mayGiveBack(a.key, a.n, l.Token) {
		return
	}
	_, _ = c.leases.Release(ctx, &pb.ReleaseRequest{Job: l.Job, Holder: a.key.holder, Token: l.Token, GiveBack: true})
}

// slotHeldBy finds the slot of job's counted lease that holder holds (a
// holder holds at most one: asking again renews it in its slot): the
// lease of a job "{job}#{k}". found is false when it holds none.
func (c *Client) slotHeldBy(ctx context.Context, job, holder string) (l Lease, found bool, err error) {
	leases, err := c.ListLeases(ctx, job+"#")
	if err != nil {
		return Lease{}, false, err
	}
	for _, l := range leases {
		k := strings.TrimPrefix(l.Job, job+"#")
		if l.Holder == holder && k != "" && strings.Trim(k, "0123456789") == "" {
			return l, true, nil
		}
	}
	return Lease{}, false, nil
}
