package leasehold_test

import (
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildConformanceWorker builds cmd/conformance-worker.
func buildConformanceWorker(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "conformance-worker")
	cmd := exec.Command("go", "build", "-o", exe, "./cmd/conformance-worker")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// conformanceWorker is a running conformance worker and its stdin.
type conformanceWorker struct {
	*worker
	stdin io.WriteCloser
}

func startConformanceWorker(t *testing.T, exe string, args ...string) *conformanceWorker {
	t.Helper()
	cmd := exec.Command(exe, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	dieWithTest(cmd)
	return &conformanceWorker{worker: startCmd(t, cmd), stdin: stdin}
}

// send writes one command line and waits for the line it expects (for a
// line starting with want, when want ends with a space; for none when
// want is "").
func (w *conformanceWorker) send(t *testing.T, command, want string) {
	t.Helper()
	if _, err := fmt.Fprintln(w.stdin, command); err != nil {
		t.Fatal(err)
	}
	if want == "" {
		return
	}
	waitUntil(t, patience, fmt.Sprintf("%q after %q", want, command), func() bool {
		if strings.HasSuffix(want, " ") {
			return w.count(want) > 0
		}
		return w.printed(want)
	})
}

// The worker's --bind, transfer and transfer-to: the leader hands over
// (transfer ok, lost), a follower is not the leader, nobody named waits
// (no-successor); with --bind, the death of the leader's process hands
// over at once, well within the TTL.
func TestConformanceWorkerTransferAndBind(t *testing.T) {
	exe := buildConformanceWorker(t)
	s := startServer(t)
	job := uniqueJob("worker-transfer")
	args := []string{"--server", s.target, "--job", job, "--name", "w", "--ttl-ms", "30000", "--bind"}
	w1 := startConformanceWorker(t, exe, args...)
	waitUntil(t, patience, "w1 elected", func() bool { return w1.printed("elected token=1") })
	w2 := startConformanceWorker(t, exe, args...)
	w2.holder(t)
	s.waitWaiters(t, 1)

	w2.send(t, "transfer", "transfer not-leader")
	w1.send(t, "transfer-to nobody", "transfer no-successor")
	w1.send(t, "transfer-to "+w2.holder(t), "transfer ok token=2")
	waitUntil(t, patience, "w1's loss", func() bool { return w1.printed("lost token=1") })
	waitUntil(t, patience, "w2 elected", func() bool { return w2.printed("elected token=2") })
	s.waitWaiters(t, 1) // w1 campaigns again

	killed := time.Now()
	_ = w2.cmd.Process.Signal(syscall.SIGKILL)
	waitUntil(t, patience, "w1 elected again", func() bool { return w1.printed("elected token=3") })
	if d := time.Since(killed); d > closedWithin {
		t.Fatalf("w1 elected %v after w2 died: expiry, not the closed connection", d)
	}
	w1.send(t, "quit", "bye")
	if n := w1.count("lost token="); n != 2 {
		t.Fatalf("w1 reported %d losses: %q", n, w1.output())
	}
}

// The worker's --yield and --preferred: a yielding leader hands over to a
// preferred worker at its next renewal, reporting the loss once; the
// preferred one is elected with the next token.
func TestConformanceWorkerPreferredAndYield(t *testing.T) {
	exe := buildConformanceWorker(t)
	s := startServer(t)
	job := uniqueJob("worker-preferred")
	args := []string{"--server", s.target, "--job", job, "--ttl-ms", "3000"}
	w1 := startConformanceWorker(t, exe, append(args, "--name", "w1", "--yield")...)
	waitUntil(t, patience, "w1 elected", func() bool { return w1.printed("elected token=1") })
	w2 := startConformanceWorker(t, exe, append(args, "--name", "w2", "--preferred")...)
	waitUntil(t, patience, "w2 elected", func() bool { return w2.printed("elected token=2") })
	waitUntil(t, patience, "w1's loss", func() bool { return w1.printed("lost token=1") })
	s.waitWaiters(t, 1) // w1 campaigns again
	w2.send(t, "quit", "bye")
	waitUntil(t, patience, "w1 elected again", func() bool { return w1.printed("elected token=3") })
	w1.send(t, "quit", "bye")
	if n := w1.count("lost token="); n != 2 {
		t.Fatalf("w1 reported %d losses: %q", n, w1.output())
	}
}

// line is the first line the worker printed that starts with prefix,
// waiting for it (bounded).
func (w *conformanceWorker) line(t *testing.T, prefix string) string {
	t.Helper()
	var found string
	waitUntil(t, patience, fmt.Sprintf("a line %q...", prefix), func() bool {
		for _, l := range w.output() {
			if strings.HasPrefix(l, prefix) {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

// await waits until the worker has printed every line of want.
func (w *conformanceWorker) await(t *testing.T, want ...string) {
	t.Helper()
	for _, l := range want {
		waitUntil(t, patience, fmt.Sprintf("%q", l), func() bool { return w.printed(l) })
	}
}

// The worker's lock, follow, fleet, history and delete-job commands, two
// workers against one server.
func TestConformanceWorkerLockFollowFleetHistoryDeleteJob(t *testing.T) {
	exe := buildConformanceWorker(t)
	s := startServer(t, "--enable-chaos")
	c, ctx := dial(t, s), ctxT(t)
	base := uniqueJob("worker-more")
	args := func(name string) []string {
		return []string{"--server", s.target, "--job", base + "-" + name, "--name", name, "--ttl-ms", "3000"}
	}
	w1 := startConformanceWorker(t, exe, args("w1")...)
	w2 := startConformanceWorker(t, exe, args("w2")...)
	w1.await(t, "elected token=1")
	w2.await(t, "elected token=1")

	// lock: w1 holds, w2 waits; the chaos API expires w1's lease: w2
	// holds with token 2, w1 reports the loss and its write is fenced.
	lockJob := base + "-L"
	w1.send(t, "lock "+lockJob, "")
	held1 := w1.line(t, "lock held "+lockJob+" token=1 holder=w1@")
	w2.send(t, "lock "+lockJob, "")
	s.waitWaiters(t, 1)
	w1.send(t, "lock-write a", "lock-write ok version=1")
	if _, err := c.Chaos().Expire(ctx, lockJob); err != nil {
		t.Fatal(err)
	}
	held2 := w2.line(t, "lock held "+lockJob+" token=2 holder=w2@")
	w1.await(t, "lock lost "+lockJob+" token=1")
	w1.send(t, "lock-write b", "lock-write fenced current=2")
	w2.send(t, "lock-write c", "lock-write ok version=2")
	w1.send(t, "unlock", "unlock done")
	w2.send(t, "unlock", "unlock done")
	if l, err := c.GetLease(ctx, lockJob); err != nil || l.Holder != "" || l.Token != 2 {
		t.Fatalf("the lock's lease: %+v %v", l, err)
	}
	if strings.TrimPrefix(held1, "lock held "+lockJob+" token=1 holder=") == strings.TrimPrefix(held2, "lock held "+lockJob+" token=2 holder=") {
		t.Fatalf("one holder for two locks: %q %q", held1, held2)
	}

	// follow: w1's elector leads; both report it (newleader, observe);
	// w1's follow-stop hands over to w2.
	followJob := base + "-F"
	w1.send(t, "follow "+followJob, "")
	h1 := strings.TrimPrefix(w1.line(t, "follow holder "), "follow holder ")
	// Its first observation is the job free or already its own.
	w1.await(t, "follow elected "+followJob+" token=1",
		fmt.Sprintf("newleader %s holder=%s token=1", followJob, h1), fmt.Sprintf("observe %s holder=%s token=1", followJob, h1))
	w2.send(t, "follow "+followJob, "")
	h2 := strings.TrimPrefix(w2.line(t, "follow holder "), "follow holder ")
	w2.await(t, fmt.Sprintf("newleader %s holder=%s token=1", followJob, h1), fmt.Sprintf("observe %s holder=%s token=1", followJob, h1))
	s.waitWaiters(t, 1)
	w1.send(t, "follow-stop", "follow-stop done")
	w1.await(t, "follow lost "+followJob+" token=1")
	w2.await(t, "follow elected "+followJob+" token=2", fmt.Sprintf("newleader %s holder=%s token=2", followJob, h2),
		fmt.Sprintf("observe %s holder=%s token=2", followJob, h2))
	if n := w2.count("newleader "); n != 2 {
		t.Fatalf("w2 reported %d new leaders: %q", n, w2.output())
	}
	w2.send(t, "follow-stop", "follow-stop done")

	// fleet: w1's set leads three jobs, w2's waits; fleet-stop hands over.
	prefix := base + "-fl"
	w1.send(t, "fleet 3 "+prefix, "")
	w1.line(t, "fleet holder w1@")
	for i := range 3 {
		w1.await(t, fmt.Sprintf("fleet elected %s%d token=1", prefix, i))
	}
	w2.send(t, "fleet 3 "+prefix, "")
	w2.line(t, "fleet holder w2@")
	s.waitWaiters(t, 3)
	w1.send(t, "fleet-stop", "fleet-stop done")
	for i := range 3 {
		w1.await(t, fmt.Sprintf("fleet lost %s%d token=1", prefix, i))
		w2.await(t, fmt.Sprintf("fleet elected %s%d token=2", prefix, i))
	}

	// history, delete-job.
	w1.send(t, "history "+lockJob, "history "+lockJob+" tokens=2,1")
	w1.send(t, "history "+base+"-never", "history "+base+"-never tokens=")
	w1.send(t, "delete-job "+prefix+"0", "delete-job in-use")
	w1.send(t, "delete-job "+lockJob, "delete-job deleted")
	w1.send(t, "delete-job "+lockJob, "delete-job absent")
	w1.send(t, "history ", "history error ")

	// quit resigns the fleet too.
	w2.send(t, "quit", "bye")
	for i := range 3 {
		if l, err := c.GetLease(ctx, fmt.Sprintf("%s%d", prefix, i)); err != nil || l.Holder != "" {
			t.Fatalf("not released at quit: %+v %v", l, err)
		}
	}
	w1.send(t, "quit", "bye")
}

// --ca and --token: the worker connects with TLS and sends the bearer
// secret on every call (the server's policy knows it as alice).
func TestConformanceWorkerWithTLSAndAToken(t *testing.T) {
	exe := buildConformanceWorker(t)
	s, pki := startSecureServer(t)
	job := uniqueJob("worker-tls")
	w := startConformanceWorker(t, exe, "--server", s.target, "--job", job, "--name", "w", "--ttl-ms", "3000",
		"--ca", filepath.Join(pki, "ca.pem"), "--token", secret(t, pki, "alice"))
	w.await(t, "elected token=1")
	w.send(t, "write a", "write ok version=1")
	w.send(t, "lock "+job+"-L", "")
	w.line(t, "lock held "+job+"-L token=1 holder=w@")
	w.send(t, "lock-write b", "lock-write ok version=1")
	w.send(t, "unlock", "unlock done")
	w.send(t, "history "+job, "history "+job+" tokens=1")
	w.send(t, "quit", "bye")
}

// ask sends command until its answer, the newest line starting with
// prefix, is want (bounded): for state that changes at the next renewal.
func (w *conformanceWorker) ask(t *testing.T, command, prefix, want string) {
	t.Helper()
	var last string
	waitUntil(t, patience, fmt.Sprintf("%q answering %q", command, want), func() bool {
		n := w.count(prefix)
		if _, err := fmt.Fprintln(w.stdin, command); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, patience, fmt.Sprintf("an answer to %q", command), func() bool { return w.count(prefix) > n })
		for _, l := range w.output() {
			if strings.HasPrefix(l, prefix) {
				last = l
			}
		}
		return last == want
	})
}

// The worker's --value, set-value, leader and waiters, and the values in
// follow's lines: the leader's value as another worker's leader() and
// observation see it, a VALUE_CHANGED observe line after set-value (and no
// newleader line for it), and the line of waiters in order.
func TestConformanceWorkerValueLeaderWaiters(t *testing.T) {
	exe := buildConformanceWorker(t)
	s := startServer(t)
	job := uniqueJob("worker-value")
	// A 10 s TTL: a waiting Acquire is asked again every 30 s, so the line
	// keeps its order while the test reads it.
	args := []string{"--server", s.target, "--job", job, "--ttl-ms", "10000"}
	w1 := startConformanceWorker(t, exe, append(args, "--name", "w1", "--value", "10.0.0.1:8080")...)
	w1.await(t, "elected token=1")
	h1 := w1.holder(t)
	w2 := startConformanceWorker(t, exe, append(args, "--name", "w2", "--value", "10.0.0.2:8080")...)
	h2 := w2.holder(t)
	s.waitWaiters(t, 1)

	w2.send(t, "leader", fmt.Sprintf("leader holder=%s token=1 value=10.0.0.1:8080", h1))
	w1.send(t, "waiters "+job, fmt.Sprintf("waiters n=1 %s", h2))
	w1.send(t, "waiters "+job+"-nobody", "waiters n=0")

	// w2 follows the job too: its follow elector waits behind its main one.
	w2.send(t, "follow "+job, "")
	fh := strings.TrimPrefix(w2.line(t, "follow holder "), "follow holder ")
	w2.await(t, fmt.Sprintf("newleader %s holder=%s token=1 value=10.0.0.1:8080", job, h1),
		fmt.Sprintf("observe %s holder=%s token=1 value=10.0.0.1:8080", job, h1))
	s.waitWaiters(t, 2)
	w1.send(t, "waiters "+job, fmt.Sprintf("waiters n=2 %s %s", h2, fh))

	w1.send(t, "set-value 10.0.0.1:9090", "set-value done")
	w2.await(t, fmt.Sprintf("observe %s holder=%s token=1 value=10.0.0.1:9090", job, h1))
	w2.ask(t, "leader", "leader ", fmt.Sprintf("leader holder=%s token=1 value=10.0.0.1:9090", h1))
	w1.send(t, "set-value", "set-value done") // clears it
	w2.await(t, fmt.Sprintf("observe %s holder=%s token=1", job, h1))
	w1.ask(t, "leader", "leader ", fmt.Sprintf("leader holder=%s token=1 value=-", h1))
	if n := w2.count("newleader "); n != 1 {
		t.Fatalf("a value change reported as a new leader: %q", w2.output())
	}
	w2.send(t, "follow-stop", "follow-stop done")

	// A follow that publishes a value: w1's newleader and observe lines
	// carry it.
	fj := job + "-F"
	w1.send(t, "follow "+fj+" 10.0.0.1:7070", "")
	f1 := strings.TrimPrefix(w1.line(t, "follow holder "), "follow holder ")
	w1.await(t, "follow elected "+fj+" token=1",
		fmt.Sprintf("newleader %s holder=%s token=1 value=10.0.0.1:7070", fj, f1),
		fmt.Sprintf("observe %s holder=%s token=1 value=10.0.0.1:7070", fj, f1))
	w1.send(t, "follow-stop", "follow-stop done")

	// w1 quits: w2 leads with its own value.
	w1.send(t, "quit", "bye")
	w2.await(t, "elected token=2")
	w2.ask(t, "leader", "leader ", fmt.Sprintf("leader holder=%s token=2 value=10.0.0.2:8080", h2))
	w2.send(t, "quit", "bye")
}

// The worker's --slots and acquire-slots: three workers on two slots,
// two elected at once in their own slots ("elected token=1 job=J#k
// slot=k"), the third elected in the slot the first frees, with its token
// + 1, and writing under it; acquire-slots answers ok, busy and invalid.
func TestConformanceWorkerSlots(t *testing.T) {
	exe := buildConformanceWorker(t)
	s := startServer(t)
	job := uniqueJob("worker-slots")
	args := []string{"--server", s.target, "--job", job, "--ttl-ms", "30000", "--slots", "2"}
	w1 := startConformanceWorker(t, exe, append(args, "--name", "w1")...)
	first := w1.line(t, "elected ")
	w2 := startConformanceWorker(t, exe, append(args, "--name", "w2")...)
	second := w2.line(t, "elected ")
	slots := []string{first, second}
	slices.Sort(slots)
	want := []string{
		fmt.Sprintf("elected token=1 job=%s#0 slot=0", job),
		fmt.Sprintf("elected token=1 job=%s#1 slot=1", job),
	}
	if !slices.Equal(slots, want) {
		t.Fatalf("elected lines %q, want %q", slots, want)
	}
	w3 := startConformanceWorker(t, exe, append(args, "--name", "w3")...)
	// w3 is queued: the server holds the job's own lease, the line's
	// turn, for the first waiter.
	c, ctx := dial(t, s), ctxT(t)
	waitUntil(t, patience, "w3's turn", func() bool {
		l, err := c.GetLease(ctx, job)
		return err == nil && l.Holder == w3.holder(t)
	})
	if n := w3.count("elected "); n != 0 {
		t.Fatalf("w3 elected with both slots held: %q", w3.output())
	}
	w1.send(t, "write a", "write ok version=1")
	w1.send(t, "quit", "bye")
	freed := strings.Replace(first, "token=1", "token=2", 1)
	w3.await(t, freed)
	w3.send(t, "write b", "write ok version=2")
	w2.send(t, "write c", "write ok version=1")

	w2.send(t, "acquire-slots "+job+" 3", "acquire-slots invalid field=slots")
	w2.send(t, "acquire-slots "+job+" 101", "acquire-slots invalid field=slots")
	w2.send(t, "acquire-slots "+job+" 2", "acquire-slots busy")
	other := uniqueJob("worker-slots-other")
	w2.send(t, "acquire-slots "+other+" 2", fmt.Sprintf("acquire-slots ok job=%s#0 slot=0 token=1", other))
	w2.send(t, "acquire-slots "+other+" 2", fmt.Sprintf("acquire-slots ok job=%s#1 slot=1 token=1", other))
	w3.send(t, "quit", "bye")
	w2.send(t, "quit", "bye")
}
