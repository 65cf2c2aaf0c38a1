package leasehold_test

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestProcessHolder(t *testing.T) {
	h := leasehold.ProcessHolder("billing")
	if !regexp.MustCompile(`^billing@[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(h) {
		t.Fatalf("holder %q", h)
	}
	if !strings.HasSuffix(leasehold.ProcessHolder("x"), h[len("billing"):]) {
		t.Fatal("one UUID per process")
	}
}

func TestAcquireRenewReleaseGetList(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "basic"
	a, err := c.Acquire(ctx, job, "a", 30*time.Second, 0)
	if err != nil || !a.Acquired || a.Lease.Holder != "a" || a.Lease.Token != 1 || a.Lease.TTL != 30*time.Second {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	busy, err := c.Acquire(ctx, job, "b", 30*time.Second, 0)
	if err != nil || busy.Acquired || busy.Lease.Holder != "a" || busy.Lease.Remaining <= 0 {
		t.Fatalf("busy: %+v %v", busy, err)
	}
	l, err := c.Renew(ctx, job, "a", 1, 20*time.Second)
	if err != nil || l.Token != 1 || l.TTL != 20*time.Second {
		t.Fatalf("renew: %+v %v", l, err)
	}
	if l, err = c.GetLease(ctx, job); err != nil || l.Holder != "a" || l.Token != 1 {
		t.Fatalf("get: %+v %v", l, err)
	}
	ls, err := c.ListLeases(ctx, "")
	if err != nil || len(ls) != 1 || ls[0].Job != job {
		t.Fatalf("list: %+v %v", ls, err)
	}
	if err := c.Release(ctx, job, "a", 1); err != nil {
		t.Fatal(err)
	}
	if l, _ = c.GetLease(ctx, job); l.Holder != "" || l.Token != 1 || l.TTL != 0 {
		t.Fatalf("after release: %+v", l)
	}
	if a, _ = c.Acquire(ctx, job, "b", 30*time.Second, 0); a.Lease.Token != 2 {
		t.Fatalf("next grant: %+v", a)
	}
}

func TestWaitingAcquireIsGrantedOnRelease(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "wait"
	if _, err := c.Acquire(ctx, job, "a", 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan leasehold.Acquired, 1)
	go func() {
		a, _ := c.Acquire(ctx, job, "b", 30*time.Second, 10*time.Second)
		got <- a
	}()
	s.waitWaiters(t, 1)
	released := time.Now()
	if err := c.Release(ctx, job, "a", 1); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if !a.Acquired || a.Lease.Token != 2 || time.Since(released) > time.Second {
		t.Fatalf("waiter: %+v after %v", a, time.Since(released))
	}
}

func TestWriteReadDeleteListKeys(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "store"
	a, _ := c.Acquire(ctx, job, "w", 30*time.Second, 0)
	tok := a.Lease.Token
	for i, want := range []uint64{1, 2} {
		v, err := c.CheckedWrite(ctx, job, tok, []byte("k1"), []byte{byte('a' + i)})
		if err != nil || v != want {
			t.Fatalf("write %d: %d %v", i, v, err)
		}
	}
	if v, err := c.CheckedWrite(ctx, job, tok, []byte("k2"), nil); err != nil || v != 1 {
		t.Fatalf("write k2: %d %v", v, err)
	}
	v, err := c.Read(ctx, job, []byte("k1"))
	if err != nil || !v.Found || string(v.Value) != "b" || v.Token != tok || v.Version != 2 {
		t.Fatalf("read: %+v %v", v, err)
	}
	keys, err := c.ListKeys(ctx, job, nil)
	if err != nil || len(keys) != 2 || string(keys[0].Key) != "k1" || keys[0].Size != 1 || keys[1].Version != 1 {
		t.Fatalf("keys: %+v %v", keys, err)
	}
	if v, err := c.Delete(ctx, job, tok, []byte("k1")); err != nil || v != 3 {
		t.Fatalf("delete: %d %v", v, err)
	}
	if v, _ := c.Read(ctx, job, []byte("k1")); v.Found || v.Version != 3 {
		t.Fatalf("after delete: %+v", v)
	}
	if keys, _ := c.ListKeys(ctx, job, []byte("k")); len(keys) != 1 || string(keys[0].Key) != "k2" {
		t.Fatalf("keys after delete: %+v", keys)
	}
}

func TestWatch(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "watch"
	w, err := c.Watch(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	next := func(kind leasehold.EventKind, holder string, token uint64) {
		t.Helper()
		e, err := w.Recv()
		if err != nil || e.Kind != kind || e.Lease.Holder != holder || e.Lease.Token != token {
			t.Fatalf("event %+v %v, want %v %q %d", e, err, kind, holder, token)
		}
	}
	next(leasehold.EventCurrent, "", 0)
	_, _ = c.Acquire(ctx, job, "a", 30*time.Second, 0)
	next(leasehold.EventAcquired, "a", 1)
	_ = c.Release(ctx, job, "a", 1)
	next(leasehold.EventReleased, "", 1)
	_, _ = c.Acquire(ctx, job, "b", 200*time.Millisecond, 0)
	next(leasehold.EventAcquired, "b", 2)
	next(leasehold.EventExpired, "", 2)
	w.Close()
	if _, err := w.Recv(); err != io.EOF {
		t.Fatalf("after Close: %v", err)
	}
}

func TestLeaseLostNamesCurrentTokenAndHolder(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "lost"
	_, _ = c.Acquire(ctx, job, "a", 200*time.Millisecond, 0)
	waitUntil(t, 5*time.Second, "expiry", func() bool { l, _ := c.GetLease(ctx, job); return l.Holder == "" })
	_, _ = c.Acquire(ctx, job, "b", 30*time.Second, 0)
	_, err := c.Renew(ctx, job, "a", 1, 30*time.Second)
	var lost *leasehold.LeaseLostError
	if !errors.As(err, &lost) || !errors.Is(err, leasehold.ErrLeaseLost) || lost.CurrentToken != 2 || lost.CurrentHolder != "b" {
		t.Fatalf("renew: %#v", err)
	}
	if status.Code(err) != codes.FailedPrecondition || leasehold.Retryable(err) {
		t.Fatalf("code %v", status.Code(err))
	}
	if err := c.Release(ctx, job, "a", 1); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("release: %v", err)
	}
}

func TestFencedNamesCurrentToken(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "fenced"
	_, _ = c.Acquire(ctx, job, "a", 30*time.Second, 0)
	_, _ = c.CheckedWrite(ctx, job, 1, []byte("k"), []byte("from 1"))
	_ = c.Release(ctx, job, "a", 1)
	_, _ = c.Acquire(ctx, job, "b", 30*time.Second, 0)
	_, err := c.CheckedWrite(ctx, job, 1, []byte("k"), []byte("stale"))
	var f *leasehold.FencedError
	if !errors.As(err, &f) || f.CurrentToken != 2 || !errors.Is(err, leasehold.ErrFenced) {
		t.Fatalf("stale write: %#v", err)
	}
	if v, _ := c.Read(ctx, job, []byte("k")); string(v.Value) != "from 1" {
		t.Fatalf("stale write landed: %+v", v)
	}
}

func TestInvalidArgumentNamesTheField(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	cases := []struct {
		name, field string
		call        func() error
	}{
		{"empty job", "job", func() error { _, err := c.Acquire(ctx, "", "h", time.Second, 0); return err }},
		{"empty holder", "holder", func() error { _, err := c.Acquire(ctx, "j", "", time.Second, 0); return err }},
		{"ttl too short", "ttl", func() error { _, err := c.Acquire(ctx, "j", "h", time.Millisecond, 0); return err }},
		{"ttl too long", "ttl", func() error { _, err := c.Acquire(ctx, "j", "h", 2*time.Hour, 0); return err }},
		{"empty key", "key", func() error { _, err := c.CheckedWrite(ctx, "j", 1, nil, []byte("v")); return err }},
	}
	for _, tc := range cases {
		err := tc.call()
		var ia *leasehold.InvalidArgumentError
		if !errors.As(err, &ia) || ia.Field != tc.field || errors.Is(err, leasehold.ErrUnknownToken) {
			t.Errorf("%s: %#v", tc.name, err)
		}
	}
	if l, _ := c.GetLease(ctx, "j"); l.Token != 0 {
		t.Fatalf("bad input changed the lease: %+v", l)
	}
}

func TestUnknownToken(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	_, _ = c.Acquire(ctx, "j", "a", 30*time.Second, 0)
	_, err := c.CheckedWrite(ctx, "j", 7, []byte("k"), []byte("v"))
	var u *leasehold.UnknownTokenError
	if !errors.As(err, &u) || u.CurrentToken != 1 || !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Fatalf("%#v", err)
	}
}

func TestUnreachableServerIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c, err := leasehold.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.GetLease(ctxT(t), "j")
	if !errors.Is(err, leasehold.ErrUnavailable) || !leasehold.Retryable(err) {
		t.Fatalf("%#v", err)
	}
}

func TestWaitingAcquireEndsWithShuttingDown(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	_, _ = c.Acquire(ctx, "j", "a", 30*time.Second, 0)
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "j", "b", 30*time.Second, 20*time.Second)
		got <- err
	}()
	s.waitWaiters(t, 1)
	s.signal(syscall.SIGTERM)
	err := <-got
	var u *leasehold.UnavailableError
	if !errors.Is(err, leasehold.ErrShuttingDown) || !errors.As(err, &u) || u.Reason != "SHUTTING_DOWN" {
		t.Fatalf("%#v", err)
	}
}

func TestDecodingOfEveryReason(t *testing.T) {
	mk := func(code codes.Code, reason, domain string) error {
		s, err := status.New(code, "m").WithDetails(&errdetails.ErrorInfo{
			Reason: reason, Domain: domain,
			Metadata: map[string]string{"current_token": "5", "field": "ttl", "free_bytes": "10", "needed_bytes": "4096",
				"limit": "--max-watchers", "max": "7"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return s.Err()
	}
	cases := []struct {
		code   codes.Code
		reason string
		is     error
	}{
		{codes.FailedPrecondition, "LEASE_LOST", leasehold.ErrLeaseLost},
		{codes.FailedPrecondition, "FENCED", leasehold.ErrFenced},
		{codes.InvalidArgument, "INVALID_ARGUMENT", leasehold.ErrInvalidArgument},
		{codes.InvalidArgument, "UNKNOWN_TOKEN", leasehold.ErrUnknownToken},
		{codes.Unavailable, "STORAGE", leasehold.ErrStorage},
		{codes.Unavailable, "SHUTTING_DOWN", leasehold.ErrShuttingDown},
		{codes.ResourceExhausted, "DISK_FULL", leasehold.ErrDiskFull},
		{codes.ResourceExhausted, "OVERLOADED", leasehold.ErrOverloaded},
		{codes.ResourceExhausted, "QUOTA_EXCEEDED", leasehold.ErrQuotaExceeded},
		{codes.FailedPrecondition, "JOB_IN_USE", leasehold.ErrJobInUse},
		{codes.FailedPrecondition, "NO_SUCCESSOR", leasehold.ErrNoSuccessor},
	}
	all := []error{leasehold.ErrLeaseLost, leasehold.ErrFenced, leasehold.ErrInvalidArgument, leasehold.ErrUnknownToken,
		leasehold.ErrStorage, leasehold.ErrShuttingDown, leasehold.ErrDiskFull, leasehold.ErrOverloaded,
		leasehold.ErrQuotaExceeded, leasehold.ErrJobInUse, leasehold.ErrNoSuccessor}
	for _, tc := range cases {
		err := leasehold.FromError(mk(tc.code, tc.reason, "leasehold"))
		for _, s := range all {
			want := s == tc.is || (tc.is == leasehold.ErrUnknownToken && s == leasehold.ErrInvalidArgument)
			if errors.Is(err, s) != want {
				t.Errorf("%s: errors.Is(%v) = %v", tc.reason, s, !want)
			}
		}
		if status.Code(err) != tc.code {
			t.Errorf("%s: code %v", tc.reason, status.Code(err))
		}
	}
	var full *leasehold.UnavailableError
	if err := leasehold.FromError(mk(codes.ResourceExhausted, "DISK_FULL", "leasehold")); !errors.As(err, &full) ||
		full.FreeBytes != 10 || full.NeededBytes != 4096 || !leasehold.Retryable(err) {
		t.Errorf("disk full: %#v", err)
	}
	var quota *leasehold.QuotaExceededError
	if err := leasehold.FromError(mk(codes.ResourceExhausted, "QUOTA_EXCEEDED", "leasehold")); !errors.As(err, &quota) ||
		quota.Limit != "--max-watchers" || quota.Max != 7 || leasehold.Retryable(err) {
		t.Errorf("quota exceeded: %#v", err)
	}
	var busy *leasehold.UnavailableError
	if err := leasehold.FromError(mk(codes.ResourceExhausted, "OVERLOADED", "leasehold")); !errors.As(err, &busy) ||
		busy.Limit != "--max-watchers" || busy.Max != 7 || !leasehold.Retryable(err) {
		t.Errorf("overloaded: %#v", err)
	}
	var none *leasehold.NoSuccessorError
	if err := leasehold.FromError(mk(codes.FailedPrecondition, "NO_SUCCESSOR", "leasehold")); !errors.As(err, &none) ||
		none.Message != "m" || leasehold.Retryable(err) || !strings.Contains(err.Error(), "NO_SUCCESSOR") {
		t.Errorf("no successor: %#v", err)
	}
	if err := leasehold.FromError(mk(codes.Unavailable, "FENCED", "other")); errors.Is(err, leasehold.ErrFenced) || !errors.Is(err, leasehold.ErrUnavailable) {
		t.Errorf("another domain: %#v", err)
	}
	if err := leasehold.FromError(status.Error(codes.PermissionDenied, "m")); status.Code(err) != codes.PermissionDenied || errors.Is(err, leasehold.ErrUnavailable) {
		t.Errorf("other code: %#v", err)
	}
}
