package leasehold_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// A server with --max-jobs 1 and --max-keys-per-job 1: the typed quota
// errors, DeleteJob refused while the job is held, then deleting it, and
// the job created again with a token above its old ones.
func TestQuotasAndDeleteJob(t *testing.T) {
	s := startServer(t, "--max-jobs", "1", "--max-keys-per-job", "1")
	c, ctx := dial(t, s), ctxT(t)
	t1 := grant(t, c, "a", "h")

	// One job is the most: a second is refused, and nothing is made.
	_, err := c.Acquire(ctx, "b", "h", 30*time.Second, 0)
	var q *leasehold.QuotaExceededError
	if !errors.Is(err, leasehold.ErrQuotaExceeded) || !errors.As(err, &q) ||
		q.Limit != "--max-jobs" || q.Max != 1 || leasehold.Retryable(err) {
		t.Fatalf("a second job: %#v", err)
	}
	if ls, err := c.ListLeases(ctx, ""); err != nil || len(ls) != 1 || ls[0].Job != "a" {
		t.Fatalf("leases %+v %v", ls, err)
	}

	// One key is the most: a second is refused, by CheckedWrite and on a
	// write stream; the first key may still be written.
	if v, err := c.CheckedWrite(ctx, "a", t1, []byte("k1"), []byte("v")); err != nil || v != 1 {
		t.Fatalf("first key: %v %v", v, err)
	}
	_, err = c.CheckedWrite(ctx, "a", t1, []byte("k2"), []byte("v"))
	if !errors.As(err, &q) || q.Limit != "--max-keys-per-job" || q.Max != 1 {
		t.Fatalf("a second key: %#v", err)
	}
	ws := openStream(t, c)
	out, err := ws.Write(ctx, []leasehold.StreamWrite{
		leasehold.Put("a", t1, []byte("k1"), []byte("w")),
		leasehold.Put("a", t1, []byte("k3"), []byte("v")),
	})
	if err != nil || len(out) != 2 || out[0].Kind != leasehold.OutcomeWritten || out[0].Version != 2 ||
		out[1].Kind != leasehold.OutcomeQuotaExceeded || out[1].Written() ||
		!strings.Contains(out[1].Message, "--max-keys-per-job") || !errors.Is(out[1].Err(), leasehold.ErrQuotaExceeded) {
		t.Fatalf("stream: %+v %v", out, err)
	}
	if out[1].Kind.String() != "QUOTA_EXCEEDED" {
		t.Fatalf("kind %v", out[1].Kind)
	}
	if keys, err := c.ListKeys(ctx, "a", nil); err != nil || len(keys) != 1 || string(keys[0].Key) != "k1" {
		t.Fatalf("keys %+v %v", keys, err)
	}

	// A held job is not deleted.
	_, err = c.DeleteJob(ctx, "a")
	var inUse *leasehold.JobInUseError
	if !errors.Is(err, leasehold.ErrJobInUse) || !errors.As(err, &inUse) || leasehold.Retryable(err) ||
		!strings.HasSuffix(err.Error(), "(JOB_IN_USE)") {
		t.Fatalf("delete a held job: %#v", err)
	}
	if v, err := c.Read(ctx, "a", []byte("k1")); err != nil || !v.Found {
		t.Fatalf("read %+v %v", v, err)
	}

	if err := c.Release(ctx, "a", "h", t1); err != nil {
		t.Fatal(err)
	}
	if deleted, err := c.DeleteJob(ctx, "a"); err != nil || !deleted {
		t.Fatalf("delete: %v %v", deleted, err)
	}
	if deleted, err := c.DeleteJob(ctx, "a"); err != nil || deleted {
		t.Fatalf("delete again: %v %v", deleted, err)
	}
	if ls, err := c.ListLeases(ctx, ""); err != nil || len(ls) != 0 {
		t.Fatalf("leases after delete %+v %v", ls, err)
	}
	if v, err := c.Read(ctx, "a", []byte("k1")); err != nil || v.Found {
		t.Fatalf("read after delete %+v %v", v, err)
	}

	// Created again, it gets a token above the old one; its room is back.
	if t2 := grant(t, c, "a", "h"); t2 <= t1 {
		t.Fatalf("token %d after %d", t2, t1)
	} else if v, err := c.CheckedWrite(ctx, "a", t2, []byte("k2"), []byte("v")); err != nil || v != 1 {
		t.Fatalf("write after re-creation: %v %v", v, err)
	}
}

// A call over --max-in-flight-per-connection is refused OVERLOADED: an
// *UnavailableError (retryable) naming the limit.
func TestCallOverTheConnectionLimitIsOverloaded(t *testing.T) {
	s := startServer(t, "--max-in-flight-per-connection", "1")
	c, ctx := dial(t, s), ctxT(t)
	grant(t, c, "j", "a")
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "j", "b", 30*time.Second, 20*time.Second)
		done <- err
	}()
	s.waitWaiters(t, 1)
	// The waiting Acquire takes the connection's one place.
	_, err := c.GetLease(ctx, "j")
	var u *leasehold.UnavailableError
	if !errors.Is(err, leasehold.ErrOverloaded) || !errors.Is(err, leasehold.ErrUnavailable) || !leasehold.Retryable(err) ||
		!errors.As(err, &u) || u.Reason != "OVERLOADED" || u.Limit != "--max-in-flight-per-connection" || u.Max != 1 {
		t.Fatalf("%#v", err)
	}
	s.stop()
	<-done
}
