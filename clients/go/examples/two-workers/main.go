// Command two-workers is a worker to start twice: one Elector for one job,
// so one of the two leads. While it leads it writes its state to the
// job's fenced store every 200 ms, carrying its token. SIGTERM or SIGINT
// (Ctrl-C) resigns: the lease is released at once, the other worker takes
// over with the next token, and this one exits 0.
//
//	two-workers -server 127.0.0.1:50051 -job reports
//
// It prints what it does, one line each:
//
//	holder NAME@UUID            who we are
//	new leader HOLDER token=N   the job's leader changed (OnNewLeader)
//	leader token=N              we lead
//	wrote version=V             a fenced write was made
//	fenced                      a write was refused: we are not the leader any more
//	lost token=N                we stopped leading
//	resigned                    stopped on a signal; exiting 0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func main() {
	server := flag.String("server", leasehold.DefaultTarget, "the leasehold server's address")
	job := flag.String("job", "two-workers", "the job to lead")
	name := flag.String("name", "worker", "name for the holder identity (NAME@UUID)")
	ttl := flag.Duration("ttl", 2*time.Second, "lease TTL")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := run(*server, *job, *name, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "two-workers:", err)
		os.Exit(1)
	}
}

func run(server, job, name string, ttl time.Duration) error {
	client, err := leasehold.Dial(server)
	if err != nil {
		return err
	}
	defer client.Close()

	elector, err := leasehold.NewElector(client, leasehold.ElectorConfig{
		Job: job, Name: name, TTL: ttl,
		Callbacks: leasehold.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, token uint64) {
				fmt.Printf("leader token=%d\n", token)
				work(ctx, client, job, token)
			},
			OnStoppedLeading: func(token uint64) { fmt.Printf("lost token=%d\n", token) },
			// value: what the leader published (ElectorConfig.Value); these
			// workers publish nothing.
			OnNewLeader: func(holder string, token uint64, value []byte) {
				fmt.Printf("new leader %s token=%d\n", holder, token)
			},
		},
	})
	if err != nil {
		return err
	}
	fmt.Printf("holder %s\n", elector.Holder())

	// A signal cancels ctx: Run releases the lease and returns nil.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := elector.Run(ctx); err != nil {
		return err // refused for good: a bad TTL or job name, or no permission
	}
	fmt.Println("resigned")
	return nil
}

// work writes our state every 200 ms, fenced by token, until ctx ends (we
// stopped leading) or a write is fenced (someone else leads now).
func work(ctx context.Context, client *leasehold.Client, job string, token uint64) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		state := fmt.Sprintf("step %d by token %d", n, token)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		version, err := client.CheckedWrite(wctx, job, token, []byte("state"), []byte(state))
		cancel()
		switch {
		case err == nil:
			fmt.Printf("wrote version=%d\n", version)
		case errors.Is(err, leasehold.ErrFenced):
			fmt.Println("fenced")
			return
		case ctx.Err() != nil:
			return
		default:
			fmt.Fprintln(os.Stderr, "write failed, trying again:", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
