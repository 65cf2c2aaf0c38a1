package leasehold_test

import (
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
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

// send writes one command line and waits for the line it expects.
func (w *conformanceWorker) send(t *testing.T, command, want string) {
	t.Helper()
	if _, err := fmt.Fprintln(w.stdin, command); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, patience, fmt.Sprintf("%q after %q", want, command), func() bool { return w.printed(want) })
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
