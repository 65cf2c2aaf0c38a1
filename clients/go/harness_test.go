package leasehold_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// server is the real `leasehold serve`, on 127.0.0.1 with ports the OS
// picks. No sleep waits for start-up: the server prints one line once both
// listeners are bound.
type server struct {
	cmd     *exec.Cmd
	target  string
	admin   string
	dataDir string
	extra   []string
}

var listening = regexp.MustCompile(`^leasehold listening on (\S+) admin (\S+)$`)

func serverBinary(t *testing.T) string {
	p := os.Getenv("LEASEHOLD_BIN")
	if p == "" {
		p = filepath.Join("..", "..", "target", "debug", "leasehold")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("leasehold binary not found at %s: run cargo build --bin leasehold or set LEASEHOLD_BIN", p)
	}
	return p
}

func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	return startServerAt(t, "127.0.0.1:0", t.TempDir(), extra...)
}

// restart starts the server again, on the same port and data dir, after
// it was killed.
func (s *server) restart(t *testing.T) *server {
	t.Helper()
	return startServerAt(t, s.target, s.dataDir, s.extra...)
}

func startServerAt(t *testing.T, listen, dataDir string, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--listen", listen, "--admin-listen", "127.0.0.1:0",
		"--data-dir", dataDir}, extra...)
	cmd := exec.Command(serverBinary(t), args...)
	cmd.Env = append(os.Environ(), "RUST_LOG=warn")
	cmd.Stderr = os.Stderr
	dieWithTest(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, dataDir: dataDir, extra: extra}
	t.Cleanup(s.stop)
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case m := <-found:
		s.target, s.admin = m[1], m[2]
	case <-time.After(30 * time.Second):
		t.Fatal("server did not print its listening line")
	}
	return s
}

// makePKI writes the test CA, certificates, tokens and policy of
// clients/tools/pki.sh into a temporary dir and returns it: alice may
// lease, write and read every job; bob may only read jobs "bob/...".
func makePKI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("bash", filepath.Join("..", "tools", "pki.sh"), dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("pki.sh: %v", err)
	}
	return dir
}

// startSecureServer starts a server with TLS, mutual TLS and the policy
// of makePKI; it returns the server and the dir of ca.pem, alice.pem,
// alice-key.pem, alice.token, bob...
func startSecureServer(t *testing.T) (*server, string) {
	t.Helper()
	pki := makePKI(t)
	f := func(name string) string { return filepath.Join(pki, name) }
	s := startServer(t, "--tls-cert", f("server.pem"), "--tls-key", f("server-key.pem"),
		"--tls-client-ca", f("ca.pem"), "--policy", f("policy.toml"))
	return s, pki
}

// signal sends sig to the server; SIGSTOP returns once it has stopped
// (waitStopped).
func (s *server) signal(sig syscall.Signal) {
	_ = s.cmd.Process.Signal(sig)
	if sig == syscall.SIGSTOP {
		waitStopped(s.cmd.Process.Pid)
	}
}

// waitStopped waits until every thread of process pid is stopped, as
// /proc/PID/task/*/stat says (state T), or the process is gone. kill(2)
// returns once SIGSTOP is sent, not once it has taken effect: the process
// stops when one of its threads takes the signal, and on a loaded machine
// another of its threads may answer one more call first. A test that
// pauses the server means "no answer from now on".
func waitStopped(pid int) {
	tasks := fmt.Sprintf("/proc/%d/task", pid)
	deadline := time.Now().Add(30 * time.Second)
	for {
		entries, err := os.ReadDir(tasks)
		if err != nil {
			return // gone
		}
		var states []string
		stopped := true
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(tasks, e.Name(), "stat"))
			if err != nil {
				continue
			}
			rest := string(b)
			if i := strings.LastIndexByte(rest, ')'); i >= 0 {
				rest = rest[i+1:]
			}
			f := strings.Fields(rest)
			if len(f) == 0 {
				continue
			}
			states = append(states, f[0])
			switch f[0] {
			case "T", "t", "Z", "X":
			default:
				stopped = false
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			panic(fmt.Sprintf("process %d did not stop within 30 s of SIGSTOP: its threads' states %v", pid, states))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// kill SIGKILLs the server and reaps it.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func (s *server) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// metric is the sum of a metric's samples on /metrics.
func (s *server) metric(t *testing.T, name string) float64 {
	resp, err := http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			total += v
		}
	}
	return total
}

// patience is how long a test waits for a state it expects: far longer
// than a stall of a loaded machine, so that only a state that never comes
// fails a test. Waiting costs only the time the state takes.
const patience = 30 * time.Second

// waitWaiters waits until at least n Acquires are queued on the server.
func (s *server) waitWaiters(t *testing.T, n float64) {
	t.Helper()
	waitUntil(t, patience, fmt.Sprintf("%v queued acquire(s)", n), func() bool {
		return s.metric(t, "leasehold_waiting_acquires") >= n
	})
}

// waitRenewals waits until the server has renewed at least n leases (all
// jobs), as its leasehold_renewals_total counter counts them.
func (s *server) waitRenewals(t *testing.T, n float64) {
	t.Helper()
	waitUntil(t, patience, fmt.Sprintf("%v renewal(s)", n), func() bool {
		return s.metric(t, "leasehold_renewals_total") >= n
	})
}

// waitUntil polls (bounded) for an external state change.
func waitUntil(t *testing.T, timeout time.Duration, what string, pred func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !pred() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dial(t *testing.T, s *server) *leasehold.Client {
	t.Helper()
	c, err := leasehold.Dial(s.target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var jobs atomic.Int64

func uniqueJob(prefix string) string { return fmt.Sprintf("%s-%d", prefix, jobs.Add(1)) }
