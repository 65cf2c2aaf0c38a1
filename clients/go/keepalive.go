package leasehold

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// The most renewals the client puts in one KeepAlive message (the server
// takes up to 1000), and the most encoded bytes, unless a single renewal
// is larger: well under the server's default message limit of about 66
// KiB.
const (
	maxRenewalsPerMessage = 1000
	maxRenewalBytes       = 48 * 1024
)

// KeepAliveRenewal is one lease to renew on a KeepAlive stream: the fields
// of Renew.
type KeepAliveRenewal struct {
	Job    string
	Holder string
	Token  uint64
	// TTL is the new lifetime, counted from when the server handles it.
	TTL time.Duration
}

// KeepAliveKind says what became of one renewal on a KeepAlive stream.
type KeepAliveKind int

const (
	// KeepAliveUnspecified is the zero value; Renew never returns it.
	KeepAliveUnspecified KeepAliveKind = iota
	// KeepAliveRenewed: Lease is ours, with the new TTL.
	KeepAliveRenewed
	// KeepAliveLeaseLost: the lease is no longer the holder's with the
	// token, as for ErrLeaseLost; Lease is the job's current lease (Holder
	// "" when free). Stop the leader's work.
	KeepAliveLeaseLost
	// KeepAliveUnknownToken: the token was never issued for the job, as
	// for ErrUnknownToken; Lease is the job's current lease.
	KeepAliveUnknownToken
	// KeepAliveInvalidArgument: the entry is malformed (Field, Message);
	// nothing changed for it.
	KeepAliveInvalidArgument
)

func (k KeepAliveKind) String() string {
	switch k {
	case KeepAliveRenewed:
		return "RENEWED"
	case KeepAliveLeaseLost:
		return "LEASE_LOST"
	case KeepAliveUnknownToken:
		return "UNKNOWN_TOKEN"
	case KeepAliveInvalidArgument:
		return "INVALID_ARGUMENT"
	}
	return "UNSPECIFIED"
}

// KeepAliveResult is the outcome of one renewal. Branch on Kind (or Err),
// not on Message.
type KeepAliveResult struct {
	// Job is the entry's job, as sent.
	Job  string
	Kind KeepAliveKind
	// Lease: our lease after the renewal (KeepAliveRenewed), or the job's
	// current lease (KeepAliveLeaseLost, KeepAliveUnknownToken). Its
	// Proof is always "": the server keeps a fleet's renewals small.
	Lease Lease
	// Field is the field at fault (KeepAliveInvalidArgument): "job",
	// "holder", "token" or "ttl".
	Field string
	// Message explains, for people, why it was not renewed.
	Message string
	// SuccessorWaiting (KeepAliveRenewed only): as Renewed's.
	SuccessorWaiting bool
}

// Err returns nil for a renewal made, else the typed error Renew returns
// in the same case: a *LeaseLostError (ErrLeaseLost), an
// *UnknownTokenError (ErrUnknownToken) or an *InvalidArgumentError
// (ErrInvalidArgument).
func (r KeepAliveResult) Err() error {
	switch r.Kind {
	case KeepAliveRenewed:
		return nil
	case KeepAliveLeaseLost:
		return &LeaseLostError{Message: r.Message, CurrentToken: r.Lease.Token, CurrentHolder: r.Lease.Holder,
			status: status.New(codes.FailedPrecondition, r.Message)}
	case KeepAliveUnknownToken:
		return &UnknownTokenError{Message: r.Message, CurrentToken: r.Lease.Token,
			status: status.New(codes.InvalidArgument, r.Message)}
	case KeepAliveInvalidArgument:
		return &InvalidArgumentError{Message: r.Message, Field: r.Field,
			status: status.New(codes.InvalidArgument, r.Message)}
	}
	return status.Error(codes.Internal, "keep-alive result has no kind")
}

func keepAliveResultFromPb(r *pb.KeepAliveResult) (KeepAliveResult, error) {
	out := KeepAliveResult{Job: r.GetJob(), Lease: leaseFromPb(r.GetLease()), Field: r.GetField(),
		Message: r.GetMessage(), SuccessorWaiting: r.GetSuccessorWaiting()}
	switch r.GetOutcome() {
	case pb.KeepAliveResult_OUTCOME_RENEWED:
		out.Kind = KeepAliveRenewed
	case pb.KeepAliveResult_OUTCOME_LEASE_LOST:
		out.Kind = KeepAliveLeaseLost
	case pb.KeepAliveResult_OUTCOME_UNKNOWN_TOKEN:
		out.Kind = KeepAliveUnknownToken
	case pb.KeepAliveResult_OUTCOME_INVALID_ARGUMENT:
		out.Kind = KeepAliveInvalidArgument
	default:
		return KeepAliveResult{}, status.Errorf(codes.Internal, "keep-alive result for job %q has no outcome (%v)",
			r.GetJob(), r.GetOutcome())
	}
	return out, nil
}

// KeepAliveOption is an option of Client.KeepAlive.
type KeepAliveOption func(*keepAliveOptions)

type keepAliveOptions struct{ bindToStream bool }

// KeepAliveBindToStream(true) binds every lease the stream renews to the
// client's connection (KeepAliveRequest.bind_to_stream), as
// BindToStream(true) binds a grant: released at once when this end of the
// connection closes or resets; not when it goes silent, and not when only
// the stream ends.
func KeepAliveBindToStream(on bool) KeepAliveOption {
	return func(o *keepAliveOptions) { o.bindToStream = on }
}

// KeepAlive is one open Leases.KeepAlive stream: many leases renewed per
// message, with a result per lease, as an ElectorSet renews its leases.
// Renew calls are made one at a time (a lock orders them); the stream is
// safe for concurrent use.
//
// When the stream breaks (the server stops, the connection is lost, a
// Renew's ctx ends before its answers came), every later Renew returns
// the error it broke with: open a new one.
type KeepAlive struct {
	stream grpc.BidiStreamingClient[pb.KeepAliveRequest, pb.KeepAliveResponse]
	cancel context.CancelFunc
	bind   bool

	mu     sync.Mutex // one Renew at a time
	nextID uint64
	err    error // once set, what every later Renew returns
}

// KeepAlive opens a KeepAlive stream. It lives until Close, until ctx is
// done, or until it breaks.
func (c *Client) KeepAlive(ctx context.Context, opts ...KeepAliveOption) (*KeepAlive, error) {
	var o keepAliveOptions
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := c.leases.KeepAlive(ctx)
	if err != nil {
		cancel()
		return nil, callError(ctx, err)
	}
	return &KeepAlive{stream: st, cancel: cancel, bind: o.bindToStream}, nil
}

// Renew renews every lease of renewals and returns one result per
// renewal, in order. Each is decided on its own, with the rules of Renew:
// a lost lease does not stop the others. More than 1000 renewals (or
// about 48 KiB of them) are split across messages, sent at once.
//
// An error means no results, and a broken stream (every later Renew
// returns it): the server ended the stream (typed as for unary calls), or
// ctx was done before every answer came (a *ContextError). Some of the
// renewals may have been made.
func (k *KeepAlive) Renew(ctx context.Context, renewals []KeepAliveRenewal) ([]KeepAliveResult, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return nil, k.err
	}
	// A Renew given up by its ctx leaves answers on their way: the stream
	// cannot be read in order any more, so it ends.
	stop := context.AfterFunc(ctx, k.cancel)
	defer stop()
	out, err := k.renew(renewals)
	if err != nil {
		if cerr := ctxDone(ctx); cerr != nil {
			err = &ContextError{Err: cerr, Cause: err}
		}
		k.err = err
		k.cancel()
		return nil, err
	}
	return out, nil
}

func (k *KeepAlive) renew(renewals []KeepAliveRenewal) ([]KeepAliveResult, error) {
	msgs := splitRenewals(renewals)
	ids := make([]uint64, len(msgs))
	for i, m := range msgs {
		k.nextID++
		ids[i] = k.nextID
		if err := k.stream.Send(&pb.KeepAliveRequest{Id: ids[i], Renewals: m, BindToStream: k.bind}); err != nil {
			if errors.Is(err, io.EOF) {
				// The stream has ended: Recv has its status.
				_, err = k.stream.Recv()
			}
			return nil, k.streamError(err)
		}
	}
	out := make([]KeepAliveResult, 0, len(renewals))
	for i, m := range msgs {
		resp, err := k.stream.Recv()
		if err != nil {
			return nil, k.streamError(err)
		}
		if resp.GetId() != ids[i] || len(resp.GetResults()) != len(m) {
			return nil, status.Errorf(codes.Internal,
				"keep-alive response %d with %d results does not answer request %d with %d renewals",
				resp.GetId(), len(resp.GetResults()), ids[i], len(m))
		}
		for _, r := range resp.GetResults() {
			res, err := keepAliveResultFromPb(r)
			if err != nil {
				return nil, err
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// streamError is the typed error of a stream that ended (err from Send or
// Recv).
func (k *KeepAlive) streamError(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return unavailable(codes.Unavailable, "keep-alive stream ended")
	}
	return FromError(err)
}

// Close ends the stream.
func (k *KeepAlive) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		k.err = unavailable(codes.Canceled, "keep-alive stream closed")
	}
	k.cancel()
	return nil
}

// splitRenewals splits renewals into messages of at most
// maxRenewalsPerMessage and about maxRenewalBytes encoded bytes (a larger
// renewal goes alone). No renewals is one empty message: a liveness probe.
func splitRenewals(renewals []KeepAliveRenewal) [][]*pb.KeepAliveRenewal {
	out := [][]*pb.KeepAliveRenewal{nil}
	bytes := 0
	for _, r := range renewals {
		p := &pb.KeepAliveRenewal{Job: r.Job, Holder: r.Holder, Token: r.Token, Ttl: dur(r.TTL)}
		n := proto.Size(p) + 4 // its tag and length prefix
		cur := out[len(out)-1]
		if len(cur) > 0 && (len(cur) == maxRenewalsPerMessage || bytes+n > maxRenewalBytes) {
			out = append(out, nil)
			bytes = 0
		}
		bytes += n
		out[len(out)-1] = append(out[len(out)-1], p)
	}
	return out
}
