package leasehold

// How a Chaos call's error is decoded. Needs no server.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestChaosErrorsSayWhenTheServerHasNoChaosAPI(t *testing.T) {
	withReason := func(code codes.Code, reason string) error {
		s, err := status.New(code, "m").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain})
		if err != nil {
			t.Fatal(err)
		}
		return s.Err()
	}
	ctx := context.Background()
	for name, in := range map[string]error{
		"unimplemented":  status.Error(codes.Unimplemented, "unknown service leasehold.v1.Chaos"),
		"chaos disabled": withReason(codes.FailedPrecondition, "CHAOS_DISABLED"),
	} {
		err := chaosError(ctx, in)
		var off *ChaosDisabledError
		if !errors.As(err, &off) || !errors.Is(err, ErrChaosDisabled) || Retryable(err) ||
			!strings.Contains(err.Error(), "--enable-chaos") || status.Code(err) != status.Code(in) {
			t.Errorf("%s: %#v", name, err)
		}
	}
	// The other reasons decode as for every call.
	if err := chaosError(ctx, withReason(codes.FailedPrecondition, "NO_SUCCESSOR")); !errors.Is(err, ErrNoSuccessor) {
		t.Errorf("no successor: %#v", err)
	}
	if err := chaosError(ctx, withReason(codes.InvalidArgument, "INVALID_ARGUMENT")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("invalid argument: %#v", err)
	}
	// A call whose ctx is done is a *ContextError, whatever the answer.
	done, cancel := context.WithCancel(ctx)
	cancel()
	var cerr *ContextError
	if err := chaosError(done, status.Error(codes.Canceled, "m")); !errors.As(err, &cerr) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %#v", err)
	}
}
