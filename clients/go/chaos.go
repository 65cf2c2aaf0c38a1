package leasehold

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// ErrChaosDisabled: the server does not serve the chaos API (it runs
// without --enable-chaos); a *ChaosDisabledError.
var ErrChaosDisabled = errors.New("leasehold: chaos API disabled")

// ChaosDisabledError: a Chaos call to a server that does not serve the
// chaos API: started without --enable-chaos (code UNIMPLEMENTED), or
// older than the API. Nothing was changed. Start the server with
// --enable-chaos, on test and staging servers only.
type ChaosDisabledError struct {
	Message string
	status  *status.Status
}

func (e *ChaosDisabledError) Error() string {
	return e.Message + " (" + e.status.Code().String() + ")"
}
func (e *ChaosDisabledError) Is(target error) bool       { return target == ErrChaosDisabled }
func (e *ChaosDisabledError) GRPCStatus() *status.Status { return e.status }

// chaosDisabled is the reason a server that declines the chaos API may
// give in its ErrorInfo (chaos.proto: FAILED_PRECONDITION, CHAOS_DISABLED),
// besides answering UNIMPLEMENTED.
const chaosDisabled = "CHAOS_DISABLED"

// chaosError is the error of a Chaos call made with ctx: a
// *ChaosDisabledError when the server does not serve the chaos API, else
// callError's.
func chaosError(ctx context.Context, err error) error {
	if s, ok := status.FromError(err); ok && ctx.Err() == nil &&
		(s.Code() == codes.Unimplemented || ErrorInfo(s).GetReason() == chaosDisabled) {
		msg := "the server does not serve the chaos API: start it with --enable-chaos (test and staging servers only)"
		if s.Message() != "" {
			msg += ": " + s.Message()
		}
		return &ChaosDisabledError{Message: msg, status: s}
	}
	return callError(ctx, err)
}

// ChaosOutcome is what a chaos action left.
type ChaosOutcome struct {
	// Lease is the job's lease after the action; the zero Lease for a
	// Clear of every job.
	Lease Lease
	// InForce says, for people, what is in force on the job now ("w@1
	// paused for 9.8s, answers delayed by 200ms, 3 writes to fence"); ""
	// when nothing is.
	InForce string
}

// Chaos is the chaos API (chaos.proto) over a Client's connection
// (Client.Chaos), for tests of workers that must step down: a server
// started with --enable-chaos (test and staging servers only) makes a
// worker lose its lease, stall, or be fenced, on purpose, without killing
// a server.
//
//	_, err := client.Chaos().Expire(ctx, "reports") // the lease is gone, now
//	// The elector's next renewal is LEASE_LOST: its leader ctx is
//	// cancelled and OnStoppedLeading follows; a write with the old token
//	// is a *FencedError.
//	_, err = client.Chaos().Clear(ctx, "") // every job's chaos
//
// The server keeps chaos in memory (a restart clears it). Every method
// returns the typed errors of the other calls (an
// *InvalidArgumentError for a bad job, duration or count; a
// *PermissionDeniedError on a listener that is not loopback without a
// policy's grant of the action "chaos"), and a *ChaosDisabledError
// (ErrChaosDisabled) when the server runs without --enable-chaos.
type Chaos struct {
	client pb.ChaosClient
}

// Chaos returns the chaos API of a server started with --enable-chaos, for
// tests of workers that must step down (see Chaos).
func (c *Client) Chaos() *Chaos { return &Chaos{client: c.chaos} }

func chaosOutcome(r *pb.ChaosResponse) ChaosOutcome {
	o := ChaosOutcome{InForce: r.GetInForce()}
	if r.GetLease() != nil {
		o.Lease = leaseFromPb(r.GetLease())
	}
	return o
}

func (ch *Chaos) answer(ctx context.Context, r *pb.ChaosResponse, err error) (ChaosOutcome, error) {
	if err != nil {
		return ChaosOutcome{}, chaosError(ctx, err)
	}
	return chaosOutcome(r), nil
}

// Expire ends job's live grant now, as an expiry would: the holder's next
// renewal gets LEASE_LOST (an Elector steps down), its writes are fenced,
// and the first waiter is granted the next token at once. The job's
// history records the tenure's end as END_CHAOS. When nobody holds the job
// nothing changes, and the outcome's Lease says so.
func (ch *Chaos) Expire(ctx context.Context, job string) (ChaosOutcome, error) {
	r, err := ch.client.Expire(ctx, &pb.ChaosJobRequest{Job: job})
	return ch.answer(ctx, r, err)
}

// Pause pauses job's holder for d (above 0, at most 1 h): its renewals are
// refused (LEASE_LOST) as if they came too late, so its grant runs out at
// its deadline and goes to the first waiter, while GetLease still shows it
// as the holder until then; its Acquires on the job are held until the
// pause ends.
func (ch *Chaos) Pause(ctx context.Context, job string, d time.Duration) (ChaosOutcome, error) {
	r, err := ch.client.Pause(ctx, &pb.ChaosPauseRequest{Job: job, Duration: dur(d)})
	return ch.answer(ctx, r, err)
}

// Delay delays every answer about job (Acquire, Renew, Release,
// TransferLease, GetLease, CheckedWrite, Read, ListKeys, KeepAlive) by by
// (above 0, at most 60 s), until cleared.
func (ch *Chaos) Delay(ctx context.Context, job string, by time.Duration) (ChaosOutcome, error) {
	r, err := ch.client.Delay(ctx, &pb.ChaosDelayRequest{Job: job, By: dur(by)})
	return ch.answer(ctx, r, err)
}

// Fence makes job's next writes fenced writes (CheckedWrite, Delete, each
// write of a WriteStream; 1 to 1,000,000) fail as FENCED, whatever their
// token.
func (ch *Chaos) Fence(ctx context.Context, job string, writes uint32) (ChaosOutcome, error) {
	r, err := ch.client.Fence(ctx, &pb.ChaosFenceRequest{Job: job, Writes: writes})
	return ch.answer(ctx, r, err)
}

// Transfer hands job's lease to its first waiter now, as a forced
// failover (TransferLease on the holder's behalf; history
// END_TRANSFERRED): the waiter is granted the next token. With nobody
// waiting it returns a *NoSuccessorError (ErrNoSuccessor) and nothing
// changes.
func (ch *Chaos) Transfer(ctx context.Context, job string) (ChaosOutcome, error) {
	r, err := ch.client.Transfer(ctx, &pb.ChaosJobRequest{Job: job})
	return ch.answer(ctx, r, err)
}

// Clear clears the chaos in force on job, or on every job when job is "".
func (ch *Chaos) Clear(ctx context.Context, job string) (ChaosOutcome, error) {
	r, err := ch.client.Clear(ctx, &pb.ChaosClearRequest{Job: job})
	return ch.answer(ctx, r, err)
}
