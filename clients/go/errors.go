package leasehold

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// Domain is the google.rpc.ErrorInfo domain of every leasehold error.
const Domain = "leasehold"

// The reason in an ErrorInfo is the name of a value of the contract's
// ErrorReason enum without this prefix ("FENCED" for ERROR_REASON_FENCED).
// FromError maps it to the generated enum value and branches on that, so
// every reason comes from the proto.
const reasonPrefix = "ERROR_REASON_"

// reasonOf is the generated ErrorReason for a reason as sent in ErrorInfo,
// or ERROR_REASON_UNSPECIFIED when there is none or it is not one this
// client's proto knows.
func reasonOf(reason string) pb.ErrorReason {
	if v, ok := pb.ErrorReason_value[reasonPrefix+reason]; ok {
		return pb.ErrorReason(v)
	}
	return pb.ErrorReason_ERROR_REASON_UNSPECIFIED
}

// reasonString is the reason as sent in ErrorInfo for a generated
// ErrorReason: its name without the prefix.
func reasonString(r pb.ErrorReason) string {
	return strings.TrimPrefix(r.String(), reasonPrefix)
}

// tagged is an error message with its reason appended: "msg (FENCED)".
func tagged(msg string, r pb.ErrorReason) string {
	return msg + " (" + reasonString(r) + ")"
}

// Sentinels for errors.Is. Every error a Client method returns for a
// failed call matches one of them (or is a plain gRPC status error for
// codes leasehold does not use):
//
//	errors.Is(err, leasehold.ErrFenced)
//
// ErrUnknownToken errors also match ErrInvalidArgument; ErrStorage,
// ErrDiskFull, ErrOverloaded and ErrShuttingDown errors also match
// ErrUnavailable. Use errors.As with *FencedError, *LeaseLostError,
// *InvalidArgumentError, *UnknownTokenError, *UnauthenticatedError,
// *PermissionDeniedError, *QuotaExceededError, *JobInUseError,
// *NoSuccessorError or *UnavailableError for the details. The Chaos
// helper's calls also return *ChaosDisabledError (ErrChaosDisabled).
var (
	ErrLeaseLost       = errors.New("leasehold: lease lost")
	ErrFenced          = errors.New("leasehold: fenced")
	ErrInvalidArgument = errors.New("leasehold: invalid argument")
	ErrUnknownToken    = errors.New("leasehold: unknown token")
	ErrUnavailable     = errors.New("leasehold: unavailable")
	ErrStorage         = errors.New("leasehold: storage")
	ErrShuttingDown    = errors.New("leasehold: shutting down")
	ErrDiskFull        = errors.New("leasehold: disk full")
	// ErrOverloaded: too many calls in flight (reason OVERLOADED); an
	// *UnavailableError with Limit and Max. Retry with backoff.
	ErrOverloaded = errors.New("leasehold: overloaded")
	// ErrQuotaExceeded: a limit on state was reached (reason
	// QUOTA_EXCEEDED); a *QuotaExceededError.
	ErrQuotaExceeded = errors.New("leasehold: quota exceeded")
	// ErrJobInUse: DeleteJob of a job whose lease is live or that an
	// Acquire waits for (reason JOB_IN_USE); a *JobInUseError.
	ErrJobInUse = errors.New("leasehold: job in use")
	// ErrNoSuccessor: TransferLease found no waiting Acquire to hand the
	// lease to (reason NO_SUCCESSOR); a *NoSuccessorError. The caller
	// still leads.
	ErrNoSuccessor = errors.New("leasehold: no successor")
	// ErrUnauthenticated: the server's policy does not know the caller.
	ErrUnauthenticated = errors.New("leasehold: unauthenticated")
	// ErrPermissionDenied: the caller's principal may not do this.
	ErrPermissionDenied = errors.New("leasehold: permission denied")
)

// LeaseLostError: Renew or Release of a lease this holder no longer has
// with this token (reason LEASE_LOST). Stop leading; retrying is useless.
type LeaseLostError struct {
	Message string
	// CurrentToken is the job's newest token (0 if the server did not say).
	CurrentToken uint64
	// CurrentHolder is the job's holder now ("" when free).
	CurrentHolder string
	status        *status.Status
}

func (e *LeaseLostError) Error() string {
	return tagged(e.Message, pb.ErrorReason_ERROR_REASON_LEASE_LOST)
}
func (e *LeaseLostError) Is(target error) bool       { return target == ErrLeaseLost }
func (e *LeaseLostError) GRPCStatus() *status.Status { return e.status }

// FencedError: a CheckedWrite with a token that is not the job's live
// token (reason FENCED). The writer is not the leader and must stop.
type FencedError struct {
	Message string
	// CurrentToken is the job's newest token.
	CurrentToken uint64
	status       *status.Status
}

func (e *FencedError) Error() string              { return tagged(e.Message, pb.ErrorReason_ERROR_REASON_FENCED) }
func (e *FencedError) Is(target error) bool       { return target == ErrFenced }
func (e *FencedError) GRPCStatus() *status.Status { return e.status }

// InvalidArgumentError: bad input (INVALID_ARGUMENT); nothing was changed.
type InvalidArgumentError struct {
	Message string
	// Field names the request field at fault ("job", "ttl", "key"...).
	Field  string
	status *status.Status
}

func (e *InvalidArgumentError) Error() string {
	return tagged(e.Message, pb.ErrorReason_ERROR_REASON_INVALID_ARGUMENT)
}
func (e *InvalidArgumentError) Is(target error) bool       { return target == ErrInvalidArgument }
func (e *InvalidArgumentError) GRPCStatus() *status.Status { return e.status }

// UnknownTokenError: a token the server never issued for the job, zero or
// above its newest (reason UNKNOWN_TOKEN). Also matches ErrInvalidArgument.
type UnknownTokenError struct {
	Message string
	// CurrentToken is the job's newest token.
	CurrentToken uint64
	status       *status.Status
}

func (e *UnknownTokenError) Error() string {
	return tagged(e.Message, pb.ErrorReason_ERROR_REASON_UNKNOWN_TOKEN)
}
func (e *UnknownTokenError) Is(target error) bool {
	return target == ErrUnknownToken || target == ErrInvalidArgument
}
func (e *UnknownTokenError) GRPCStatus() *status.Status { return e.status }

// UnauthenticatedError: the server's policy does not know the caller
// (reason UNAUTHENTICATED): no credentials, or a token or certificate of
// no principal. Retrying with the same credentials cannot help.
type UnauthenticatedError struct {
	Message string
	status  *status.Status
}

func (e *UnauthenticatedError) Error() string {
	return tagged(e.Message, pb.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
}
func (e *UnauthenticatedError) Is(target error) bool       { return target == ErrUnauthenticated }
func (e *UnauthenticatedError) GRPCStatus() *status.Status { return e.status }

// PermissionDeniedError: the caller's principal may not do this (reason
// PERMISSION_DENIED): no grant for the action on the job, or the job's
// lease is another principal's. Retrying cannot help until the policy or
// the holder changes; nothing was changed.
type PermissionDeniedError struct {
	Message string
	// Action is the action refused: "lease", "write", "read", "admin" or
	// "chaos".
	Action string
	// Job is the job the call was refused on.
	Job    string
	status *status.Status
}

func (e *PermissionDeniedError) Error() string {
	return tagged(e.Message, pb.ErrorReason_ERROR_REASON_PERMISSION_DENIED)
}
func (e *PermissionDeniedError) Is(target error) bool       { return target == ErrPermissionDenied }
func (e *PermissionDeniedError) GRPCStatus() *status.Status { return e.status }

// QuotaExceededError: a limit on state was reached (reason QUOTA_EXCEEDED,
// code RESOURCE_EXHAUSTED): too many jobs (--max-jobs), keys in a job
// (--max-keys-per-job), watchers (--max-watchers) or waiters on a job
// (--max-waiters-per-job). Nothing was changed; retrying helps only once
// the state shrinks (DeleteJob gives jobs and keys back, watchers and
// waiters leave), so it is not Retryable.
type QuotaExceededError struct {
	Message string
	// Limit is the flag that sets the limit, such as "--max-jobs".
	Limit string
	// Max is the limit's value.
	Max    uint64
	status *status.Status
}

func (e *QuotaExceededError) Error() string {
	return tagged(e.Message, pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED)
}
func (e *QuotaExceededError) Is(target error) bool       { return target == ErrQuotaExceeded }
func (e *QuotaExceededError) GRPCStatus() *status.Status { return e.status }

// JobInUseError: DeleteJob of a job whose lease is live, or that an
// Acquire waits for (reason JOB_IN_USE, code FAILED_PRECONDITION). Nothing
// was deleted; retry once the lease is released or has expired and nobody
// waits.
type JobInUseError struct {
	Message string
	status  *status.Status
}

func (e *JobInUseError) Error() string {
	return tagged(e.Message, pb.ErrorReason_ERROR_REASON_JOB_IN_USE)
}
func (e *JobInUseError) Is(target error) bool       { return target == ErrJobInUse }
func (e *JobInUseError) GRPCStatus() *status.Status { return e.status }

// NoSuccessorError: TransferLease (or Elector.Transfer) named a
// successor that has no Acquire waiting on the job, or nobody waits
// (reason NO_SUCCESSOR, code FAILED_PRECONDITION). Nothing changed: the
// caller still leads. Retry once a successor waits, or release.
type NoSuccessorError struct {
	Message string
	status  *status.Status
}

func (e *NoSuccessorError) Error() string {
	return tagged(e.Message, pb.ErrorReason_ERROR_REASON_NO_SUCCESSOR)
}
func (e *NoSuccessorError) Is(target error) bool       { return target == ErrNoSuccessor }
func (e *NoSuccessorError) GRPCStatus() *status.Status { return e.status }

// UnavailableError: the server could not be reached or could not answer
// (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, a transport failure), or
// refused for a reason retrying later can fix: Reason STORAGE (the store
// could not make the change durable), SHUTTING_DOWN, DISK_FULL (code
// RESOURCE_EXHAUSTED: the server's disk is nearly full, the change was
// refused before anything was written; reads go on), or OVERLOADED (code
// RESOURCE_EXHAUSTED: too many calls in flight, the call was not run;
// retry with backoff). The outcome of a change is unknown unless the
// reason says otherwise.
type UnavailableError struct {
	Message string
	Code    codes.Code
	// Reason is the ErrorInfo reason as sent (the ErrorReason value's name
	// without its ERROR_REASON_ prefix: STORAGE, SHUTTING_DOWN, DISK_FULL,
	// OVERLOADED), or "".
	Reason string
	// FreeBytes and NeededBytes: for DISK_FULL, what the server reported.
	FreeBytes, NeededBytes uint64
	// Limit and Max: for OVERLOADED, the flag of the limit reached (such
	// as "--max-in-flight-per-connection") and its value.
	Limit  string
	Max    uint64
	status *status.Status
}

func (e *UnavailableError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s (%s)", e.Message, e.Reason)
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}
func (e *UnavailableError) Is(target error) bool {
	switch target {
	case ErrUnavailable:
		return true
	case ErrStorage:
		return reasonOf(e.Reason) == pb.ErrorReason_ERROR_REASON_STORAGE
	case ErrShuttingDown:
		return reasonOf(e.Reason) == pb.ErrorReason_ERROR_REASON_SHUTTING_DOWN
	case ErrDiskFull:
		return reasonOf(e.Reason) == pb.ErrorReason_ERROR_REASON_DISK_FULL
	case ErrOverloaded:
		return reasonOf(e.Reason) == pb.ErrorReason_ERROR_REASON_OVERLOADED
	}
	return false
}
func (e *UnavailableError) GRPCStatus() *status.Status { return e.status }

// Retryable reports whether retrying the same call later can help.
func Retryable(err error) bool { return errors.Is(err, ErrUnavailable) }

// ErrorInfo returns the leasehold ErrorInfo in a status's details, if any.
func ErrorInfo(s *status.Status) *errdetails.ErrorInfo {
	for _, d := range s.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return info
		}
	}
	return nil
}

// FromError turns an error from a generated stub into the typed error for
// its status. A nil error stays nil; an error that is not a gRPC status
// becomes an *UnavailableError.
func FromError(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return &UnavailableError{Message: err.Error(), Code: codes.Unknown, status: s}
	}
	info := ErrorInfo(s)
	reason := info.GetReason()
	meta := info.GetMetadata()
	num := func(key string) uint64 {
		t, _ := strconv.ParseUint(meta[key], 10, 64)
		return t
	}
	token := func() uint64 { return num("current_token") }
	msg := s.Message()
	if msg == "" {
		msg = s.Code().String()
	}
	switch reasonOf(reason) {
	case pb.ErrorReason_ERROR_REASON_LEASE_LOST:
		return &LeaseLostError{Message: msg, CurrentToken: token(), CurrentHolder: meta["current_holder"], status: s}
	case pb.ErrorReason_ERROR_REASON_FENCED:
		return &FencedError{Message: msg, CurrentToken: token(), status: s}
	case pb.ErrorReason_ERROR_REASON_UNKNOWN_TOKEN:
		return &UnknownTokenError{Message: msg, CurrentToken: token(), status: s}
	case pb.ErrorReason_ERROR_REASON_INVALID_ARGUMENT:
		return &InvalidArgumentError{Message: msg, Field: meta["field"], status: s}
	case pb.ErrorReason_ERROR_REASON_UNAUTHENTICATED:
		return &UnauthenticatedError{Message: msg, status: s}
	case pb.ErrorReason_ERROR_REASON_PERMISSION_DENIED:
		return &PermissionDeniedError{Message: msg, Action: meta["action"], Job: meta["job"], status: s}
	case pb.ErrorReason_ERROR_REASON_STORAGE, pb.ErrorReason_ERROR_REASON_SHUTTING_DOWN:
		return &UnavailableError{Message: msg, Code: s.Code(), Reason: reason, status: s}
	case pb.ErrorReason_ERROR_REASON_DISK_FULL:
		return &UnavailableError{Message: msg, Code: s.Code(), Reason: reason,
			FreeBytes: num("free_bytes"), NeededBytes: num("needed_bytes"), status: s}
	case pb.ErrorReason_ERROR_REASON_OVERLOADED:
		return &UnavailableError{Message: msg, Code: s.Code(), Reason: reason,
			Limit: meta["limit"], Max: num("max"), status: s}
	case pb.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED:
		return &QuotaExceededError{Message: msg, Limit: meta["limit"], Max: num("max"), status: s}
	case pb.ErrorReason_ERROR_REASON_JOB_IN_USE:
		return &JobInUseError{Message: msg, status: s}
	case pb.ErrorReason_ERROR_REASON_NO_SUCCESSOR:
		return &NoSuccessorError{Message: msg, status: s}
	}
	switch s.Code() {
	case codes.InvalidArgument:
		return &InvalidArgumentError{Message: msg, Field: meta["field"], status: s}
	case codes.Unauthenticated:
		return &UnauthenticatedError{Message: msg, status: s}
	case codes.PermissionDenied:
		return &PermissionDeniedError{Message: msg, status: s}
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return &UnavailableError{Message: msg, Code: s.Code(), status: s}
	}
	return s.Err()
}
