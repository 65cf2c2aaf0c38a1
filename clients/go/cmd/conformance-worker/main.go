// Command conformance-worker is the conformance worker for Go
// (clients/conformance/README.md has the protocol): one Elector for one
// job, driven over stdin, reporting on stdout; and, on command, a lock
// (Client.WithLock), an elector that follows a job (OnNewLeader, and
// Client.Observe), a fleet (ElectorSet), a job's history and DeleteJob,
// the leader's value (ElectorConfig.Value, SetValue, Leader), a job's
// waiters (ListWaiters), and counted leases (--slots: ElectorConfig.Slots;
// acquire-slots: AcquireSlots), and a member of a shard group (shards:
// Client.JoinShards and ShardMember.Run).
// Also a complete example of a worker: lead, write fenced by the token,
// release on SIGTERM.
//
//	conformance-worker --server 127.0.0.1:50051 --job j --name w1 --ttl-ms 1000 [--bind] [--preferred] [--yield] [--value V] [--slots N] [--ca FILE] [--token SECRET]
//
// With --slots N the elector campaigns for one of N slots of a counted
// lease on the job: its line "elected token=<T>" then ends with
// " job=<the slot's job> slot=<k>", and "write" writes under the slot's
// job. The command "acquire-slots <job> <n>" is a one-shot Acquire (wait
// 0, a fresh holder <name>@<uuid>, the worker's TTL) of one of n slots:
// "acquire-slots ok job=<job> slot=<k> token=<T>", "acquire-slots busy",
// "acquire-slots invalid field=<field>" or "acquire-slots error <msg>";
// its lease is left to expire.
//
// "shards <group> <n>" joins the group (n shards) as a member named
// --name, with the worker's TTL and a revoke timeout of the TTL, and runs
// a work per shard that waits until cancelled: "shards member <id>", then
// "shards assigned <k> token=<T>", "shards revoked <k>" (once the shard's
// work was cancelled, before the acknowledgement) and
// "shards lost <k> token=<T>"; a refused join prints
// "shards invalid field=<f>" or "shards error <msg>". "shards-write <k>
// <value>" writes "status" under the job "<group>/<k>" with the token the
// worker last owned shard k with: "shards-write ok version=<V>",
// "shards-write fenced current=<T>", "shards-write error never-owned" or
// "shards-write error <msg>". "shards-stop" leaves the group:
// "shards-stop done". quit and SIGTERM leave it too.
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
	bind := flag.Bool("bind", false, "bind the elector's grants to its connection (BindToStream)")
	preferred := flag.Bool("preferred", false, "campaign as a preferred candidate (Preferred)")
	yield := flag.Bool("yield", false, "hand over to a waiting preferred candidate at the next renewal (YieldToPreferred)")
	ca := flag.String("ca", "", "connect with TLS, trusting this CA (PEM file)")
	token := flag.String("token", "", "send this bearer secret on every call")
	value := flag.String("value", "", "the value the elector publishes with its lease (ElectorConfig.Value)")
	slots := flag.Uint("slots", 0, "campaign for one of N slots of a counted lease on the job (ElectorConfig.Slots)")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ttl := time.Duration(*ttlMs) * time.Millisecond

	client, err := leasehold.DialWith(*server, leasehold.Security{CAFile: *ca, Token: *token})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	var mu sync.Mutex
	var lastToken uint64 // the token we last led with, kept after losing
	lastJob := *job      // the job that token is of: a counted lease's slot job
	elector, err := leasehold.NewElector(client, leasehold.ElectorConfig{
		Job: *job, Name: *name, TTL: time.Duration(*ttlMs) * time.Millisecond,
		BindToStream: *bind, Preferred: *preferred, YieldToPreferred: *yield, Value: []byte(*value),
		Slots: uint32(*slots),
		Callbacks: leasehold.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, token uint64) {
				// The job of this token, even if the term has ended since.
				leaseJob, _ := leasehold.LeaseJobFrom(ctx)
				mu.Lock()
				lastToken, lastJob = token, leaseJob
				mu.Unlock()
				if *slots >= 2 {
					slot := strings.TrimPrefix(leaseJob, *job+"#")
					say("elected token=%d job=%s slot=%s", token, leaseJob, slot)
				} else {
					say("elected token=%d", token)
				}
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
	var twins []*twin // two more electors, one name, one process
	// The lock, the follow and the fleet: one of each at a time.
	var lk *heldLock
	var lastLock *heldLock // the last lock taken: lock-write's token
	var fl, ft *background
	// The shard member: one at a time; shards-write uses the last one's
	// tokens, even after shards-stop.
	var sm, lastShards *shardMember

	go func() {
		defer cancel()
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
			mu.Lock()
			token, tokenJob := lastToken, lastJob
			mu.Unlock()
			switch cmd {
			case "quit":
				return
			case "write":
				say("%s", write(client, tokenJob, token, arg))
			case "bad":
				say("bad %s %s", arg, bad(client, *job, elector.Holder(), token, arg))
			case "transfer":
				say("transfer %s", transfer(elector, ""))
			case "transfer-to":
				say("transfer %s", transfer(elector, arg))
			case "twin":
				mu.Lock()
				if twins == nil {
					twins = startTwins(ctx, client, arg, *name, ttl)
				}
				mu.Unlock()
			case "twin-write":
				i, value, _ := strings.Cut(arg, " ")
				t := twins[index(i)]
				say("twin-%s", write(client, t.job, t.last(), value))
			case "twin-stop":
				twins[index(arg)].stop()
				say("twin-stop done")
			case "lock":
				if lk != nil {
					say("lock error a lock is taken already: unlock first")
					break
				}
				lk = startLock(ctx, client, arg, *name, ttl)
				lastLock = lk
			case "lock-write":
				say("lock-%s", lockWrite(client, lastLock, arg))
			case "unlock":
				lk.stop()
				lk = nil
				say("unlock done")
			case "follow":
				if fl != nil {
					say("follow error a follow runs already: follow-stop first")
					break
				}
				fl = startFollow(ctx, client, arg, *name, ttl)
			case "follow-stop":
				fl.stop()
				fl = nil
				say("follow-stop done")
			case "fleet":
				if ft != nil {
					say("fleet error a fleet runs already: fleet-stop first")
					break
				}
				ft = startFleet(ctx, client, arg, *name, ttl)
			case "fleet-stop":
				ft.stop()
				ft = nil
				say("fleet-stop done")
			case "history":
				say("history %s", history(client, arg))
			case "delete-job":
				say("delete-job %s", deleteJob(client, arg))
			case "set-value":
				say("set-value %s", setValue(elector, arg))
			case "leader":
				say("leader %s", leader(elector))
			case "waiters":
				say("waiters %s", waiters(client, arg))
			case "acquire-slots":
				say("acquire-slots %s", acquireSlots(client, arg, *name, ttl))
			case "shards":
				if sm.running() {
					say("shards error a member runs already: shards-stop first")
					break
				}
				sm = startShards(ctx, client, arg, *name, ttl)
				lastShards = sm
			case "shards-write":
				say("shards-%s", shardsWrite(client, lastShards, arg))
			case "shards-stop":
				sm.stop()
				sm = nil
				say("shards-stop done")
			case "":
			default:
				say("error unknown command %q", cmd)
			}
		}
	}()
	<-done
	mu.Lock()
	stopping := twins
	mu.Unlock()
	for _, t := range stopping {
		t.stop()
	}
	// ctx is done: the lock, the follow and the fleet resign (they run
	// under ctx); wait until they have.
	bg.wait()
	say("bye")
}

// twin is one of two electors with the same name for one job in this
// process: each is its own holder, so at most one leads.
type twin struct {
	job    string
	mu     sync.Mutex
	token  uint64 // the token it last led with
	cancel context.CancelFunc
	done   chan struct{}
}

func (t *twin) last() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.token
}

func (t *twin) stop() {
	t.cancel()
	<-t.done
}

func startTwins(ctx context.Context, c *leasehold.Client, job, name string, ttl time.Duration) []*twin {
	var twins []*twin
	var electors []*leasehold.Elector
	for i := range 2 {
		t := &twin{job: job, done: make(chan struct{})}
		e, err := leasehold.NewElector(c, leasehold.ElectorConfig{
			Job: job, Name: name, TTL: ttl,
			Callbacks: leasehold.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context, token uint64) {
					t.mu.Lock()
					t.token = token
					t.mu.Unlock()
					say("twin elected %d token=%d", i, token)
				},
				OnStoppedLeading: func(token uint64) { say("twin lost %d token=%d", i, token) },
			},
		})
		if err != nil {
			log.Fatal(err)
		}
		twins = append(twins, t)
		electors = append(electors, e)
		say("twin holder %d %s", i, e.Holder())
	}
	for i, e := range electors {
		tctx, cancel := context.WithCancel(ctx)
		twins[i].cancel = cancel
		go func() { e.Run(tctx); close(twins[i].done) }()
	}
	return twins
}

func index(s string) int {
	if s == "1" {
		return 1
	}
	return 0
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

// transfer hands the elector's leadership to the first waiter, or to the
// waiting holder to; the elector reports the end of its leadership as a
// loss ("lost token=N").
func transfer(e *leasehold.Elector, to string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.Transfer(ctx, to)
	switch {
	case err == nil:
		return fmt.Sprintf("ok token=%d", l.Token)
	case errors.Is(err, leasehold.ErrNoSuccessor):
		return "no-successor"
	case errors.Is(err, leasehold.ErrLeaseLost):
		return "lost"
	case errors.Is(err, leasehold.ErrNotLeader):
		return "not-leader"
	default:
		return fmt.Sprintf("error %v", err)
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
