// Package leasehold is the Go client for leasehold: per-job leases with
// fencing tokens, an Elector, and a key-value store fenced by the tokens,
// over gRPC. The generated code is in package leaseholdv1.
//
//	client, err := leasehold.Dial("127.0.0.1:50051")
//	elector, err := leasehold.NewElector(client, leasehold.ElectorConfig{
//		Job: "bridge_health", Name: "bridge", TTL: 10 * time.Second,
//		Callbacks: leasehold.LeaderCallbacks{
//			OnStartedLeading: func(ctx context.Context, token uint64) {
//				// lead until ctx is done; carry token into every write
//				_, err := client.CheckedWrite(ctx, "bridge_health", token, []byte("status"), []byte("ok"))
//				if errors.Is(err, leasehold.ErrFenced) { /* not the leader any more */ }
//			},
//		},
//	})
//	err = elector.Run(ctx) // campaigns until ctx is done, then releases
//
// Every method returns typed errors (see FromError): errors.Is(err,
// ErrFenced), errors.As(err, &fencedErr) for the current token, and so on.
package leasehold

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// DefaultTarget is the server address of a default installation.
const DefaultTarget = "127.0.0.1:50051"

const pageSize = 1000

// Client is a typed client over one gRPC connection. Safe for concurrent
// use; share one per process.
type Client struct {
	conn   *grpc.ClientConn
	leases pb.LeasesClient
	store  pb.FencedStoreClient
	chaos  pb.ChaosClient
	shards pb.ShardsClient
	// calls: Acquires and Renews on their way, and tokens told, per (job,
	// holder): what a cancelled Acquire's give-back must respect.
	calls *calls
}

// Dial makes a client for target ("host:port", or "http://host:port" as
// the Rust client takes it). The connection reconnects from 100 ms up to
// 1 s apart after it breaks (see reconnectSoon). Without options the connection is insecure
// (plaintext); options are passed on to grpc.NewClient after that default,
// so grpc.WithTransportCredentials overrides it. For TLS, mutual TLS and a
// bearer token, see DialWith; an "https://" target is dialled with TLS
// (the system's roots), as DialWith does.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	if strings.HasPrefix(target, "https://") {
		return DialWith(target, Security{}, opts...)
	}
	for _, scheme := range []string{"http://", "grpc://"} {
		target = strings.TrimPrefix(target, scheme)
	}
	target = strings.TrimSuffix(target, "/")
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), reconnectSoon}, opts...)
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, &InvalidArgumentError{Message: "bad server address: " + err.Error(), Field: "server"}
	}
	c := New(conn)
	c.conn = conn
	return c, nil
}

// reconnectSoon: after the connection breaks, try again from 100 ms, up
// to 1 s apart (grpc-go's default goes up to 120 s), so a client is back
// within about a second of the server. An option given to Dial overrides
// it.
var reconnectSoon = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 5 * time.Second,
})

// New makes a client over an existing connection, which the caller closes.
func New(conn grpc.ClientConnInterface) *Client {
	return &Client{leases: pb.NewLeasesClient(conn), store: pb.NewFencedStoreClient(conn),
		chaos: pb.NewChaosClient(conn), shards: pb.NewShardsClient(conn), calls: newCalls()}
}

// Close closes the connection if Dial made it.
func (c *Client) Close() error {
	if c.conn != nil {
		return c.conn.Close()
	}
	return nil
}

// Acquire asks for the lease on job; it waits up to wait for the lease to
// free up (bound ctx accordingly, or leave it without a deadline).
//
// A waiting Acquire (wait > 0) whose ctx is done before the answer gives
// back a grant it may have been given meanwhile, so that the job is not
// held for a whole TTL by a holder that never learned its token: the
// server releases a grant whose reply it could not deliver, and for a
// reply that was on its way as ctx was cancelled, a goroutine asks, 100 ms
// later, whether the lease is now holder's and gives it back. A give-back
// never ends a lease a caller was told it holds: not while another
// Acquire or Renew of this client for the job and holder started since or
// is on its way, not a token one of them was told, and not once the
// holder asked again from anywhere (the server's give_back release).
// Holders are unique per elector, so the lease is never someone else's.
// The error then matches context.Canceled or context.DeadlineExceeded
// (see ContextError).
//
// Options: BindToStream(true) binds the grant to this client's
// connection; Preferred(true) asks as a preferred candidate, queued ahead
// of the waiters that are not; AcquireValue(v) publishes v with the grant
// (Lease.Value: where to reach the leader); AcquireSlots(n) asks for one
// of n slots of a counted lease (a semaphore), granted as the slot's own
// job, Lease.Job.
func (c *Client) Acquire(ctx context.Context, job, holder string, ttl, wait time.Duration, opts ...AcquireOption) (Acquired, error) {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	call := c.calls.start(job, holder)
	defer call.end()
	r, err := c.leases.Acquire(ctx, &pb.AcquireRequest{Job: job, Holder: holder, Ttl: dur(ttl), Wait: dur(wait),
		BindToStream: o.bindToStream, Preferred: o.preferred, Value: o.value, Slots: o.slots})
	if err != nil {
		if wait > 0 && ctx.Err() != nil {
			call.end()
			go c.giveBack(call, o.slots >= 2)
		}
		return Acquired{}, callError(ctx, err)
	}
	a := Acquired{Acquired: r.GetAcquired(), Lease: leaseFromPb(r.GetLease())}
	if a.Acquired {
		call.told(a.Lease.Token)
	}
	return a, nil
}

// Renew extends our live lease by ttl from now. It fails with
// ErrLeaseLost when the lease is not ours any more. RenewLease also says
// whether a preferred candidate waits. RenewValue(v) replaces the lease's
// value (empty clears it); without it the value is kept.
func (c *Client) Renew(ctx context.Context, job, holder string, token uint64, ttl time.Duration, opts ...RenewOption) (Lease, error) {
	r, err := c.RenewLease(ctx, job, holder, token, ttl, opts...)
	return r.Lease, err
}

// RenewLease is Renew, with the whole answer: the lease, and
// SuccessorWaiting, true while a preferred candidate (an Acquire with
// Preferred(true)) waits and our grant is not a preferred one. Nothing is
// taken from us: hand over with TransferLease when it suits.
// RenewValue(v) replaces the lease's value, as for Renew.
func (c *Client) RenewLease(ctx context.Context, job, holder string, token uint64, ttl time.Duration, opts ...RenewOption) (Renewed, error) {
	var o renewOptions
	for _, opt := range opts {
		opt(&o)
	}
	call := c.calls.start(job, holder)
	defer call.end()
	// A nil value leaves the optional field unset: the server keeps the
	// lease's value.
	r, err := c.leases.Renew(ctx, &pb.RenewRequest{Job: job, Holder: holder, Token: token, Ttl: dur(ttl), Value: o.value})
	if err != nil {
		return Renewed{}, callError(ctx, err)
	}
	l := leaseFromPb(r.GetLease())
	call.told(l.Token)
	return Renewed{Lease: l, SuccessorWaiting: r.GetSuccessorWaiting()}, nil
}

// Release steps down; the first waiter is granted at once.
func (c *Client) Release(ctx context.Context, job, holder string, token uint64) error {
	if _, err := c.leases.Release(ctx, &pb.ReleaseRequest{Job: job, Holder: holder, Token: token}); err != nil {
		return callError(ctx, err)
	}
	c.calls.released(job, holder)
	return nil
}

// TransferLease hands our live lease (holder with token) to a waiting
// Acquire, in one step: the successor is granted token+1 with no moment
// when the job is free, and its waiting Acquire returns at once. The
// successor is the first waiter in line whose holder is toHolder, or the
// first waiter in line when toHolder is "". ttl is the successor's lease
// lifetime; 0 keeps the TTL the lease has now. It returns the successor's
// lease.
//
// With no such waiter it fails with a *NoSuccessorError (ErrNoSuccessor)
// and nothing changes: we still lead. When the lease is not holder's with
// token any more (expired, released, handed over already) it fails with a
// *LeaseLostError (ErrLeaseLost), as Renew would.
func (c *Client) TransferLease(ctx context.Context, job, holder string, token uint64, toHolder string, ttl time.Duration) (Lease, error) {
	req := &pb.TransferLeaseRequest{Job: job, Holder: holder, Token: token, ToHolder: toHolder}
	if ttl > 0 {
		req.Ttl = dur(ttl)
	}
	r, err := c.leases.TransferLease(ctx, req)
	if err != nil {
		return Lease{}, callError(ctx, err)
	}
	c.calls.released(job, holder)
	return leaseFromPb(r.GetLease()), nil
}

// GetLease returns the lease of job (token 0, no holder, if never granted).
func (c *Client) GetLease(ctx context.Context, job string) (Lease, error) {
	r, err := c.leases.GetLease(ctx, &pb.GetLeaseRequest{Job: job})
	if err != nil {
		return Lease{}, callError(ctx, err)
	}
	return leaseFromPb(r), nil
}

// Waiter is one Acquire waiting in a job's line (ListWaiters).
type Waiter struct {
	// Holder is the waiting holder (an Elector's Holder()).
	Holder string
	// Principal is the principal of the server's policy it asked as; ""
	// without a policy.
	Principal string
	// Preferred: it asked as a preferred candidate (Preferred(true)).
	Preferred bool
}

// WaitingLine is the answer to ListWaiters.
type WaitingLine struct {
	// Waiters, first in line first: the order in which releases would
	// hand the lease over (the preferred candidates first, then the
	// others, each class first come, first served). At most the limit
	// asked for.
	Waiters []Waiter
	// Waiting is how many wait in all (may be more than listed).
	Waiting uint32
}

// ListWaiters returns the Acquires waiting for job, in line order, at
// most limit of them (0: the server's default of 100; at most 1000), and
// how many wait in all: the candidates a release or a TransferLease to ""
// would hand the lease to, first one first. A job nobody waits for, or
// that does not exist, has an empty line, not an error. With a policy it
// needs read on the job.
func (c *Client) ListWaiters(ctx context.Context, job string, limit uint32) (WaitingLine, error) {
	r, err := c.leases.ListWaiters(ctx, &pb.ListWaitersRequest{Job: job, Limit: limit})
	if err != nil {
		return WaitingLine{}, callError(ctx, err)
	}
	line := WaitingLine{Waiting: r.GetWaiting()}
	for _, w := range r.GetWaiters() {
		line.Waiters = append(line.Waiters, Waiter{Holder: w.GetHolder(), Principal: w.GetPrincipal(), Preferred: w.GetPreferred()})
	}
	return line, nil
}

// SigningKeys returns the server's public keys, which verify grants'
// proofs (Lease.Proof) with VerifyProof: the first signs new grants, every
// one listed verifies. Empty when the server signs nothing (etcd mode
// without --signing-key). The same set is served as a JWKS at GET /keys
// on the admin port.
func (c *Client) SigningKeys(ctx context.Context) (KeySet, error) {
	r, err := c.leases.GetSigningKeys(ctx, &pb.GetSigningKeysRequest{})
	if err != nil {
		return KeySet{}, callError(ctx, err)
	}
	return KeySetFrom(r)
}

// DeleteJob deletes job and every key of its fenced store, if its lease is
// not live and no Acquire waits for it (a *JobInUseError, ErrJobInUse,
// otherwise). It reports whether there was such a job. A job created again
// later gets tokens above its old ones.
func (c *Client) DeleteJob(ctx context.Context, job string) (bool, error) {
	r, err := c.leases.DeleteJob(ctx, &pb.DeleteJobRequest{Job: job})
	if err != nil {
		return false, callError(ctx, err)
	}
	return r.GetDeleted(), nil
}

// ListLeases returns every lease whose job starts with prefix, all pages.
func (c *Client) ListLeases(ctx context.Context, prefix string) ([]Lease, error) {
	var out []Lease
	page := ""
	for {
		r, err := c.leases.ListLeases(ctx, &pb.ListLeasesRequest{Prefix: prefix, PageSize: pageSize, PageToken: page})
		if err != nil {
			return nil, callError(ctx, err)
		}
		for _, l := range r.GetLeases() {
			out = append(out, leaseFromPb(l))
		}
		if r.GetNextPageToken() == "" {
			return out, nil
		}
		page = r.GetNextPageToken()
	}
}

// Watch is one watch of a job's lease.
type Watch struct {
	stream grpc.ServerStreamingClient[pb.LeaseEvent]
	cancel context.CancelFunc
}

// Recv returns the next event; io.EOF when the watch ended normally, or
// after Close.
func (w *Watch) Recv() (LeaseEvent, error) {
	e, err := w.stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return LeaseEvent{}, io.EOF
		}
		return LeaseEvent{}, FromError(err)
	}
	return eventFromPb(e), nil
}

// Close ends the watch.
func (w *Watch) Close() { w.cancel() }

// Watch watches job: the current lease first (EventCurrent), then every
// change of holder or token, and of the holder's value
// (EventValueChanged), until ctx is done or Close is called.
func (c *Client) Watch(ctx context.Context, job string) (*Watch, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := c.leases.WatchLease(ctx, &pb.WatchLeaseRequest{Job: job})
	if err != nil {
		cancel()
		return nil, callError(ctx, err)
	}
	return &Watch{stream: s, cancel: cancel}, nil
}

// CheckedWrite stores value under (job, key), fenced by token, and returns
// the key's new version. It fails with ErrFenced when token is not the
// job's live token. WithProof(lease.Proof) fences it with the grant's
// proof instead (token may then be 0).
func (c *Client) CheckedWrite(ctx context.Context, job string, token uint64, key, value []byte, opts ...WriteOption) (uint64, error) {
	return c.write(ctx, &pb.CheckedWriteRequest{Job: job, Token: token, Key: key, Value: value}, opts)
}

// Delete deletes (job, key), fenced by token, and returns the new version.
// WithProof fences it with a grant's proof instead, as for CheckedWrite.
func (c *Client) Delete(ctx context.Context, job string, token uint64, key []byte, opts ...WriteOption) (uint64, error) {
	return c.write(ctx, &pb.CheckedWriteRequest{Job: job, Token: token, Key: key, Delete: true}, opts)
}

func (c *Client) write(ctx context.Context, req *pb.CheckedWriteRequest, opts []WriteOption) (uint64, error) {
	var o writeOptions
	for _, opt := range opts {
		opt(&o)
	}
	req.Proof = o.proof
	r, err := c.store.CheckedWrite(ctx, req)
	if err != nil {
		return 0, callError(ctx, err)
	}
	return r.GetVersion(), nil
}

// Read reads (job, key); reads are linearizable.
func (c *Client) Read(ctx context.Context, job string, key []byte) (Value, error) {
	r, err := c.store.Read(ctx, &pb.ReadRequest{Job: job, Key: key})
	if err != nil {
		return Value{}, callError(ctx, err)
	}
	return Value{Found: r.GetFound(), Value: r.GetValue(), Token: r.GetToken(), Version: r.GetVersion()}, nil
}

// ListKeys returns every live key of job starting with prefix, all pages.
func (c *Client) ListKeys(ctx context.Context, job string, prefix []byte) ([]KeyInfo, error) {
	var out []KeyInfo
	var page []byte
	for {
		r, err := c.store.ListKeys(ctx, &pb.ListKeysRequest{Job: job, Prefix: prefix, PageSize: pageSize, PageToken: page})
		if err != nil {
			return nil, callError(ctx, err)
		}
		for _, k := range r.GetKeys() {
			out = append(out, KeyInfo{Key: k.GetKey(), Token: k.GetToken(), Version: k.GetVersion(), Size: k.GetSize()})
		}
		if len(r.GetNextPageToken()) == 0 {
			return out, nil
		}
		page = r.GetNextPageToken()
	}
}
