// Command conformance-worker is the conformance worker for Go
// (clients/conformance/README.md has the protocol): one Elector for one
// job, driven over stdin, reporting on stdout. Also a complete example of
// a worker: lead, write fenced by the token, release on SIGTERM.
//
//	conformance-worker --server 127.0.0.1:50051 --job j --name w1 --ttl-ms 1000
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

var out sync.Mutex

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
}

func main() {
	server := flag.String("server", leasehold.DefaultTarget, "server address")
	job := flag.String("job", "", "the job to lead")
	name := flag.String("name", "worker", "name for the holder identity")
	ttlMs := flag.Int("ttl-ms", 1000, "lease TTL in milliseconds")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	client, err := leasehold.Dial(*server)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	var mu sync.Mutex
	var lastToken uint64 // the token we last led with, kept after losing
	elector, err := leasehold.NewElector(client, leasehold.ElectorConfig{
		Job: *job, Name: *name, TTL: time.Duration(*ttlMs) * time.Millisecond,
		Callbacks: leasehold.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, token uint64) {
				mu.Lock()
				lastToken = token
				mu.Unlock()
				say("elected token=%d", token)
			},
			OnStoppedLeading: func(token uint64) { say("lost token=%d", token) },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	say("holder %s", elector.Holder())

	// SIGTERM (or quit, or the end of input) cancels ctx: Run releases.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { elector.Run(ctx); close(done) }()

	go func() {
		defer cancel()
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
			mu.Lock()
			token := lastToken
			mu.Unlock()
			switch cmd {
			case "quit":
				return
			case "write":
				say("%s", write(client, *job, token, arg))
			case "bad":
				say("bad %s %s", arg, bad(client, *job, elector.Holder(), token, arg))
			case "":
			default:
				say("error unknown command %q", cmd)
			}
		}
	}()
	<-done
	say("bye")
}

func write(c *leasehold.Client, job string, token uint64, value string) string {
	// No "am I still the leader?" check first: it could be stale by the
	// time the write lands. The token goes with the write; the server
	// decides.
	if token == 0 {
		return "write error never-led"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.CheckedWrite(ctx, job, token, []byte("status"), []byte(value))
	var f *leasehold.FencedError
	switch {
	case err == nil:
		return fmt.Sprintf("write ok version=%d", v)
	case errors.As(err, &f):
		return fmt.Sprintf("write fenced current=%d", f.CurrentToken)
	default:
		return fmt.Sprintf("write error %T %v", err, err)
	}
}

func bad(c *leasehold.Client, job, holder string, token uint64, which string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if token == 0 {
		token = 1
	}
	var err error
	switch which {
	case "job":
		_, err = c.Acquire(ctx, "", holder, time.Second, 0)
	case "ttl":
		_, err = c.Acquire(ctx, job, holder, time.Millisecond, 0)
	case "key":
		_, err = c.CheckedWrite(ctx, job, token, nil, []byte("x"))
	case "token":
		_, err = c.CheckedWrite(ctx, job, 1<<62, []byte("status"), []byte("x"))
	default:
		return "error unknown case"
	}
	var u *leasehold.UnknownTokenError
	var ia *leasehold.InvalidArgumentError
	switch {
	case err == nil:
		return "accepted"
	case errors.As(err, &u):
		return fmt.Sprintf("unknown-token current=%d", u.CurrentToken)
	case errors.As(err, &ia):
		return fmt.Sprintf("invalid field=%s", ia.Field)
	default:
		return fmt.Sprintf("other %T %v", err, err)
	}
}
