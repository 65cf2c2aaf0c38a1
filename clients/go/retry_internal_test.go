package leasehold

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pastDeadline is a context whose deadline has passed but whose timer has
// not fired yet: Err is still nil, as it is for a moment in a real one.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// The server ends a call at the deadline the client sent it; its answer
// can beat the client's own timer, and is still the caller's deadline.
func TestAnAnswerAfterTheDeadlineIsTheDeadlinesError(t *testing.T) {
	server := status.Error(codes.Canceled, "Timeout expired")
	err := callError(pastDeadline{context.Background()}, server)
	var ce *ContextError
	if !errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded) || Retryable(err) {
		t.Fatalf("past the deadline: %v (retryable %v)", err, Retryable(err))
	}
	live, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := callError(live, server); errors.As(err, &ce) || !Retryable(err) {
		t.Fatalf("before the deadline the server's answer stands: %v", err)
	}
}

func TestBackoffDoublesWithJitterUpToItsCap(t *testing.T) {
	b := &retryBackoff{base: 100 * time.Millisecond, max: time.Second}
	for _, ms := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want := ms * time.Millisecond
		if d := b.next(); d < want/2 || d > want {
			t.Fatalf("wait %v not in [%v, %v]", d, want/2, want)
		}
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Fatalf("after reset: %v", d)
	}
	long := &retryBackoff{base: 5 * time.Second, max: 5 * time.Second}
	if d := long.nextBefore(time.Now().Add(2 * time.Second)); d > time.Second {
		t.Fatalf("a renew retry waits at most half the time left: %v", d)
	}
}

func TestOneWarningEveryFewSecondsWithTheCountOfTheRest(t *testing.T) {
	var w warnings
	t0 := time.Now()
	if n, ok := w.allow(t0); !ok || n != 0 {
		t.Fatal("the first warning is logged")
	}
	for i := 1; i < 50; i++ {
		if _, ok := w.allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("warning %d logged", i)
		}
	}
	if n, ok := w.allow(t0.Add(warnEvery)); !ok || n != 49 {
		t.Fatalf("after %v: %d, %v", warnEvery, n, ok)
	}
}
