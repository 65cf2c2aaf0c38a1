package leasehold_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildTwoWorkers builds examples/two-workers as a user would: from its
// own folder, as its own module requiring the client through the replace
// directive its go.mod has (and the README shows), with its committed
// go.sum and nothing fetched (GOPROXY=off: the module cache only).
func buildTwoWorkers(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "two-workers")
	cmd := exec.Command("go", "build", "-o", exe, ".")
	cmd.Dir = filepath.Join("examples", "two-workers")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in %s: %v\n%s", cmd.Dir, err, out)
	}
	return exe
}

// worker is one running process of the example, its output kept by line.
type worker struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	exited chan struct{}
	err    error
}

func startWorker(t *testing.T, exe string, args ...string) *worker {
	t.Helper()
	return startCmd(t, exec.Command(exe, args...))
}

// startCmd starts cmd (its Stdin set by the caller, if any) as a worker.
func startCmd(t *testing.T, cmd *exec.Cmd) *worker {
	t.Helper()
	w := &worker{cmd: cmd, exited: make(chan struct{})}
	w.cmd.Stderr = os.Stderr
	dieWithTest(w.cmd)
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.mu.Unlock()
		}
		w.err = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-w.exited:
		default:
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
	})
	return w
}

func (w *worker) output() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}

func (w *worker) printed(line string) bool { return slices.Contains(w.output(), line) }

func (w *worker) count(prefix string) int {
	n := 0
	for _, l := range w.output() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

var holderLine = regexp.MustCompile(`^holder (\S+)$`)

func (w *worker) holder(t *testing.T) string {
	t.Helper()
	var h string
	waitUntil(t, 10*time.Second, "the holder line", func() bool {
		for _, l := range w.output() {
			if m := holderLine.FindStringSubmatch(l); m != nil {
				h = m[1]
				return true
			}
		}
		return false
	})
	return h
}

// stop SIGTERMs the worker and waits for it to exit.
func (w *worker) stop(t *testing.T) error {
	t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
		return w.err
	case <-time.After(10 * time.Second):
		t.Fatalf("worker did not exit on SIGTERM; output %q", w.output())
		return nil
	}
}

func TestTwoWorkersExample(t *testing.T) {
	exe := buildTwoWorkers(t)
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	job := uniqueJob("two-workers")
	args := []string{"-server", s.target, "-job", job, "-name", "worker"}
	w1, w2 := startWorker(t, exe, args...), startWorker(t, exe, args...)
	h1, h2 := w1.holder(t), w2.holder(t)
	if h1 == h2 {
		t.Fatalf("one holder for two workers: %s", h1)
	}

	waitUntil(t, 10*time.Second, "a leader", func() bool {
		return w1.printed("leader token=1") || w2.printed("leader token=1")
	})
	leader, follower, leaderHolder, followerHolder := w1, w2, h1, h2
	if w2.printed("leader token=1") {
		leader, follower, leaderHolder, followerHolder = w2, w1, h2, h1
	}
	waitUntil(t, 5*time.Second, "three fenced writes", func() bool { return leader.count("wrote version=") >= 3 })
	waitUntil(t, 5*time.Second, "the follower told of the leader", func() bool {
		return follower.printed(fmt.Sprintf("new leader %s token=1", leaderHolder))
	})
	if n := follower.count("leader token="); n != 0 {
		t.Fatalf("both lead: follower printed %q", follower.output())
	}
	if v, err := c.Read(ctx, job, []byte("state")); err != nil || !v.Found || v.Token != 1 {
		t.Fatalf("state: %+v %v", v, err)
	}

	t0 := time.Now()
	if err := leader.stop(t); err != nil {
		t.Fatalf("the leader exited with %v; output %q", err, leader.output())
	}
	for _, want := range []string{"lost token=1", "resigned"} {
		if !leader.printed(want) {
			t.Fatalf("the leader did not print %q: %q", want, leader.output())
		}
	}
	waitUntil(t, 5*time.Second, "the take-over", func() bool { return follower.printed("leader token=2") })
	t.Logf("take-over %v after the SIGTERM", time.Since(t0).Round(time.Millisecond))
	waitUntil(t, 2*time.Second, "the follower's report of itself", func() bool {
		return follower.printed(fmt.Sprintf("new leader %s token=2", followerHolder))
	})
	waitUntil(t, 5*time.Second, "the new leader's writes", func() bool {
		v, err := c.Read(ctx, job, []byte("state"))
		return err == nil && v.Token == 2
	})
	if err := follower.stop(t); err != nil {
		t.Fatalf("the second worker exited with %v; output %q", err, follower.output())
	}
	if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "" || l.Token != 2 {
		t.Fatalf("not released: %+v %v", l, err)
	}
}
