package leasehold_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

func openStream(t *testing.T, c *leasehold.Client) *leasehold.WriteStream {
	t.Helper()
	ws, err := c.WriteStream(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

func grant(t *testing.T, c *leasehold.Client, job, holder string) uint64 {
	t.Helper()
	a, err := c.Acquire(ctxT(t), job, holder, 30*time.Second, 0)
	if err != nil || !a.Acquired {
		t.Fatalf("acquire %s for %s: %+v %v", job, holder, a, err)
	}
	return a.Lease.Token
}

// written checks that every outcome is WRITTEN with the given versions.
func written(t *testing.T, out []leasehold.WriteOutcome, err error, versions ...uint64) {
	t.Helper()
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]uint64, len(out))
	for i, o := range out {
		if !o.Written() || o.Err() != nil {
			t.Fatalf("outcome %d: %+v", i, o)
		}
		got[i] = o.Version
	}
	if !slices.Equal(got, versions) {
		t.Fatalf("versions %v, want %v", got, versions)
	}
}

func TestWriteStreamWritesReadsAndDeletes(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "stream"
	tok := grant(t, c, job, "w")
	ws := openStream(t, c)

	out, err := ws.Write(ctx, []leasehold.StreamWrite{
		leasehold.Put(job, tok, []byte("a"), []byte("1")),
		leasehold.Put(job, tok, []byte("b"), []byte("x")),
		leasehold.Put(job, tok, []byte("a"), []byte("2")),
		{Job: job, Token: tok, Key: []byte("a"), Value: []byte("3")},
	})
	written(t, out, err, 1, 1, 2, 3)

	out, err = ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(job, tok, []byte("c"), []byte("v1"))})
	written(t, out, err, 1)
	out, err = ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(job, tok, []byte("c"), []byte("v2"))})
	written(t, out, err, 2)
	out, err = ws.Write(ctx, []leasehold.StreamWrite{leasehold.Delete(job, tok, []byte("c"))})
	written(t, out, err, 3)
	out, err = ws.Write(ctx, nil)
	written(t, out, err)

	for _, want := range []struct {
		key, value string
		found      bool
		version    uint64
	}{{"a", "3", true, 3}, {"b", "x", true, 1}, {"c", "", false, 3}} {
		v, err := c.Read(ctx, job, []byte(want.key))
		if err != nil || v.Found != want.found || string(v.Value) != want.value || v.Version != want.version ||
			v.Token != tok {
			t.Fatalf("read %s: %+v %v", want.key, v, err)
		}
	}

	if err := ws.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(job, tok, []byte("a"), nil)})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, leasehold.ErrUnavailable) {
			t.Fatalf("write after close: %#v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("write after close hangs")
	}
	if v, _ := c.Read(ctx, job, []byte("a")); v.Version != 3 {
		t.Fatalf("write after close landed: %+v", v)
	}
}

func TestWriteStreamMalformedWriteIsAnsweredAlone(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "malformed"
	tok := grant(t, c, job, "w")
	ws := openStream(t, c)
	out, err := ws.Write(ctx, []leasehold.StreamWrite{
		leasehold.Put(job, tok, []byte("k1"), []byte("v")),
		leasehold.Put(job, tok, nil, []byte("v")),
		leasehold.Put(job, tok, []byte("k2"), []byte("v")),
		leasehold.Put(job, tok, []byte("k3"), make([]byte, 64*1024+1)),
		leasehold.Put(job, tok, []byte("k1"), []byte("w")),
	})
	if err != nil || len(out) != 5 {
		t.Fatalf("write: %+v %v", out, err)
	}
	for i, want := range []struct {
		kind    leasehold.OutcomeKind
		version uint64
		field   string
	}{
		{leasehold.OutcomeWritten, 1, ""},
		{leasehold.OutcomeInvalidArgument, 0, "key"},
		{leasehold.OutcomeWritten, 1, ""},
		{leasehold.OutcomeInvalidArgument, 0, "value"},
		{leasehold.OutcomeWritten, 2, ""},
	} {
		o := out[i]
		if o.Kind != want.kind || o.Version != want.version || o.Field != want.field {
			t.Errorf("outcome %d: %+v, want %+v", i, o, want)
		}
		if want.kind == leasehold.OutcomeInvalidArgument {
			var ia *leasehold.InvalidArgumentError
			if err := o.Err(); !errors.As(err, &ia) || ia.Field != want.field || o.Message == "" ||
				errors.Is(err, leasehold.ErrUnknownToken) {
				t.Errorf("outcome %d error: %#v", i, err)
			}
		}
	}
	if v, _ := c.Read(ctx, job, []byte("k3")); v.Found || v.Version != 0 {
		t.Fatalf("oversized value landed: %+v", v)
	}
	if v, _ := c.Read(ctx, job, []byte("k1")); string(v.Value) != "w" || v.Version != 2 {
		t.Fatalf("k1: %+v", v)
	}
}

func TestWriteStreamFenced(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "fenced"
	t1 := grant(t, c, job, "a")
	ws := openStream(t, c)
	out, err := ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(job, t1, []byte("k"), []byte("from a"))})
	written(t, out, err, 1)
	if err := c.Release(ctx, job, "a", t1); err != nil {
		t.Fatal(err)
	}
	t2 := grant(t, c, job, "b")
	if t2 != t1+1 {
		t.Fatalf("tokens %d then %d", t1, t2)
	}
	// The old leader's write is fenced before the new leader wrote
	// anything; the new leader's write in the same message goes through.
	out, err = ws.Write(ctx, []leasehold.StreamWrite{
		leasehold.Put(job, t1, []byte("k"), []byte("stale")),
		leasehold.Put(job, t2, []byte("other"), []byte("from b")),
	})
	if err != nil || len(out) != 2 {
		t.Fatalf("write: %+v %v", out, err)
	}
	var f *leasehold.FencedError
	if o := out[0]; o.Kind != leasehold.OutcomeFenced || o.CurrentToken != t2 || o.Written() ||
		!errors.As(o.Err(), &f) || f.CurrentToken != t2 || !errors.Is(o.Err(), leasehold.ErrFenced) {
		t.Fatalf("stale write: %+v", o)
	}
	if o := out[1]; o.Kind != leasehold.OutcomeWritten || o.Version != 1 {
		t.Fatalf("new leader's write: %+v", o)
	}
	if v, _ := c.Read(ctx, job, []byte("k")); string(v.Value) != "from a" || v.Version != 1 || v.Token != t1 {
		t.Fatalf("stale write landed: %+v", v)
	}
}

func TestWriteStreamUnknownToken(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "unknown"
	tok := grant(t, c, job, "a")
	ws := openStream(t, c)
	out, err := ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(job, tok+6, []byte("k"), []byte("v"))})
	if err != nil || len(out) != 1 {
		t.Fatalf("write: %+v %v", out, err)
	}
	var u *leasehold.UnknownTokenError
	if o := out[0]; o.Kind != leasehold.OutcomeUnknownToken || o.CurrentToken != tok || !errors.As(o.Err(), &u) ||
		u.CurrentToken != tok || !errors.Is(o.Err(), leasehold.ErrInvalidArgument) {
		t.Fatalf("outcome: %+v", o)
	}
	if v, _ := c.Read(ctx, job, []byte("k")); v.Found {
		t.Fatalf("write landed: %+v", v)
	}
}

// sizes records the number of writes in each WriteStream message the
// client sends.
type sizes struct {
	mu sync.Mutex
	n  []int
}

func (z *sizes) take() []int {
	z.mu.Lock()
	defer z.mu.Unlock()
	n := z.n
	z.n = nil
	return n
}

type countingStream struct {
	grpc.ClientStream
	z *sizes
}

func (c countingStream) SendMsg(m any) error {
	if r, ok := m.(*pb.WriteStreamRequest); ok {
		c.z.mu.Lock()
		c.z.n = append(c.z.n, len(r.GetWrites()))
		c.z.mu.Unlock()
	}
	return c.ClientStream.SendMsg(m)
}

func TestWriteStreamSplitsLargeBatches(t *testing.T) {
	s := startServer(t)
	z := &sizes{}
	c, err := leasehold.Dial(s.target, grpc.WithStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			return countingStream{cs, z}, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, job := ctxT(t), "split"
	tok := grant(t, c, job, "w")
	ws := openStream(t, c)

	const n = 2500
	batch := make([]leasehold.StreamWrite, n)
	want := make([]uint64, n)
	for i := range batch {
		batch[i] = leasehold.Put(job, tok, []byte("k"), []byte(strconv.Itoa(i)))
		want[i] = uint64(i + 1)
	}
	out, err := ws.Write(ctx, batch)
	written(t, out, err, want...)
	if got := z.take(); !slices.Equal(got, []int{1000, 1000, 500}) {
		t.Fatalf("messages of %v writes", got)
	}
	if v, _ := c.Read(ctx, job, []byte("k")); string(v.Value) != "2499" || v.Version != n {
		t.Fatalf("read: %+v", v)
	}

	// By size: two 20 KiB values fit in one message, three do not; a
	// value larger than the budget goes alone.
	big := func(k string, size int) leasehold.StreamWrite {
		return leasehold.Put(job, tok, []byte(k), bytes.Repeat([]byte("x"), size))
	}
	out, err = ws.Write(ctx, []leasehold.StreamWrite{
		big("a", 20<<10), big("b", 20<<10), big("c", 20<<10), big("d", 60<<10), big("e", 10), big("f", 10),
	})
	written(t, out, err, 1, 1, 1, 1, 1, 1)
	if got := z.take(); !slices.Equal(got, []int{2, 1, 1, 2}) {
		t.Fatalf("messages of %v writes", got)
	}
}

func TestWriteStreamConcurrentWriters(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "concurrent"
	tok := grant(t, c, job, "w")
	ws := openStream(t, c)
	const writers, rounds = 6, 20
	// Writer g's key starts at version g, so an answer handed to the
	// wrong writer shows as a wrong version.
	for g := range writers {
		for range g {
			if _, err := c.CheckedWrite(ctx, job, tok, []byte{byte('a' + g)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte{byte('a' + g)}
			next := uint64(g + 1)
			for r := range rounds {
				// Batches of 1 to 3 writes to our key.
				batch := make([]leasehold.StreamWrite, 1+(g+r)%3)
				for i := range batch {
					batch[i] = leasehold.Put(job, tok, key, []byte(fmt.Sprintf("%d-%d-%d", g, r, i)))
				}
				out, err := ws.Write(ctx, batch)
				if err != nil || len(out) != len(batch) {
					t.Errorf("writer %d round %d: %+v %v", g, r, out, err)
					return
				}
				for i, o := range out {
					if !o.Written() || o.Version != next {
						t.Errorf("writer %d round %d write %d: %+v, want version %d", g, r, i, o, next)
						return
					}
					next++
				}
			}
		}()
	}
	wg.Wait()
}

func TestWriteStreamAbandonedWriteLeavesTheStreamUsable(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "abandoned"
	tok := grant(t, c, job, "w")
	ws := openStream(t, c)
	s.signal(syscall.SIGSTOP)
	// A signal is delivered asynchronously: wait until the server is
	// stopped (state T in /proc), or it may still answer.
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	waitUntil(t, 5*time.Second, "the server to stop", func() bool {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatalf("cannot see whether the server stopped: %v", err)
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		return len(f) > 0 && f[0] == "T"
	})
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := ws.Write(short, []leasehold.StreamWrite{leasehold.Put(job, tok, []byte("k"), []byte("1"))})
	s.signal(syscall.SIGCONT)
	var u *leasehold.UnavailableError
	if !errors.As(err, &u) || u.Code != codes.DeadlineExceeded {
		t.Fatalf("write to a stopped server: %#v", err)
	}
	// The abandoned write was sent: it may or may not have been made
	// (here it was). The next Write gets its own answer, not the late one.
	out, err := ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(job, tok, []byte("k"), []byte("2"))})
	written(t, out, err, 2)
}

func TestWriteStreamEndsWithShuttingDown(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), "shutdown"
	tok := grant(t, c, job, "w")
	ws := openStream(t, c)
	out, err := ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(job, tok, []byte("k"), []byte("v"))})
	written(t, out, err, 1)
	s.signal(syscall.SIGTERM)
	// Writes racing the shutdown may still be answered; then the stream
	// ends with SHUTTING_DOWN (or the connection closes). Each Write is
	// bounded so that a hang shows as DEADLINE_EXCEEDED, which fails.
	for i := 0; err == nil; i++ {
		if i == 200 {
			t.Fatal("writes still answered 2 s after SIGTERM")
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = ws.Write(wctx, []leasehold.StreamWrite{leasehold.Put(job, tok, []byte("k"), []byte("v"))})
		cancel()
		if err == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	var u *leasehold.UnavailableError
	if !errors.As(err, &u) || (u.Reason != "SHUTTING_DOWN" && u.Code != codes.Unavailable) {
		t.Fatalf("write after SIGTERM: %#v", err)
	}
	t.Logf("write after SIGTERM: %v", err)
	if _, again := ws.Write(ctx, nil); again != err {
		t.Fatalf("later write: %#v, want the same error %#v", again, err)
	}
	if cerr := ws.Close(); cerr != err {
		t.Fatalf("close: %#v", cerr)
	}
}
