package leasehold

import (
	"context"
	"math/rand/v2"
	"time"
)

// warnEvery: an elector logs at most one retry warning this often; the
// ones in between are counted, and the count goes with the next warning.
const warnEvery = 5 * time.Second

// retryBackoff is jittered exponential backoff: the n-th wait is drawn evenly
// from [d/2, d] with d = min(max, base * 2^n).
type retryBackoff struct {
	base, max time.Duration
	attempt   int
}

// campaignBackoff: from TTL/10 (10 ms to 100 ms), doubling, up to 1 s, so
// a campaign asks again within about a second of the server coming back.
func campaignBackoff(ttl time.Duration) *retryBackoff {
	return &retryBackoff{base: min(max(ttl/10, 10*time.Millisecond), 100*time.Millisecond), max: time.Second}
}

// renewBackoff: from TTL/10 (at least 10 ms), doubling, up to 1 s;
// nextBefore caps each wait further so a retry is sent before the
// deadline.
func renewBackoff(ttl time.Duration) *retryBackoff {
	base := max(ttl/10, 10*time.Millisecond)
	return &retryBackoff{base: base, max: max(time.Second, base)}
}

func (b *retryBackoff) reset() { b.attempt = 0 }

func (b *retryBackoff) next() time.Duration {
	d := b.base << min(b.attempt, 20)
	if d > b.max || d <= 0 {
		d = b.max
	}
	b.attempt++
	half := d / 2
	return half + rand.N(half+1)
}

// nextBefore is next, but never past half the time left to deadline (nor
// under 10 ms): a retry still goes out before the deadline.
func (b *retryBackoff) nextBefore(deadline time.Time) time.Duration {
	return max(min(b.next(), time.Until(deadline)/2), 10*time.Millisecond)
}

// warnings limits retry warnings to one every warnEvery.
type warnings struct {
	last       time.Time
	suppressed int
}

// allow reports whether to log a warning now and, if so, how many were
// suppressed since the last one logged.
func (w *warnings) allow(now time.Time) (int, bool) {
	if !w.last.IsZero() && now.Sub(w.last) < warnEvery {
		w.suppressed++
		return 0, false
	}
	w.last = now
	n := w.suppressed
	w.suppressed = 0
	return n, true
}

// callError is the error of a call made with ctx: a *ContextError when ctx
// was cancelled or its deadline passed, else FromError's.
//
// The deadline is read from the clock, not only from ctx.Err(): the server
// ends a call at the deadline the client sent it ("Timeout expired"), and
// that answer can arrive before the timer behind ctx has fired.
func callError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return &ContextError{Err: cerr, Cause: FromError(err)}
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return &ContextError{Err: context.DeadlineExceeded, Cause: FromError(err)}
	}
	return FromError(err)
}

// ContextError is the error of a call whose context was cancelled or whose
// deadline passed: errors.Is(err, context.Canceled) (or
// context.DeadlineExceeded) holds, and it is not Retryable: the caller
// gave up, retrying the same call with the same context cannot help.
type ContextError struct {
	// Err is ctx.Err(): context.Canceled or context.DeadlineExceeded.
	Err error
	// Cause is the leasehold error the call failed with, as FromError
	// decodes it.
	Cause error
}

func (e *ContextError) Error() string { return "leasehold: " + e.Err.Error() }
func (e *ContextError) Unwrap() error { return e.Err }
