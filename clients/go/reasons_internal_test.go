package leasehold

// The reasons come from the contract: every value of the generated
// ErrorReason enum maps from its wire string and back. Needs no server.

import (
	"strings"
	"testing"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

func TestEveryErrorReasonMapsFromItsWireStringAndBack(t *testing.T) {
	values := pb.ErrorReason_ERROR_REASON_UNSPECIFIED.Descriptor().Values()
	n := 0
	for i := 0; i < values.Len(); i++ {
		r := pb.ErrorReason(values.Get(i).Number())
		if r == pb.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		n++
		wire := reasonString(r)
		if wire == "" || strings.HasPrefix(wire, "ERROR_REASON_") || "ERROR_REASON_"+wire != string(values.Get(i).Name()) {
			t.Errorf("%v: wire string %q", r, wire)
		}
		if got := reasonOf(wire); got != r {
			t.Errorf("reasonOf(%q) = %v, want %v", wire, got, r)
		}
	}
	if n == 0 {
		t.Fatal("the generated ErrorReason has no reasons")
	}
	if got := reasonString(pb.ErrorReason_ERROR_REASON_FENCED); got != "FENCED" {
		t.Errorf("reasonString(FENCED) = %q", got)
	}
	if got := reasonOf("LEASE_LOST"); got != pb.ErrorReason_ERROR_REASON_LEASE_LOST {
		t.Errorf("reasonOf(LEASE_LOST) = %v", got)
	}
}

func TestAnUnknownReasonMapsToUnspecified(t *testing.T) {
	for _, reason := range []string{"NOT_A_REASON", "fenced", "ERROR_REASON_FENCED", ""} {
		if got := reasonOf(reason); got != pb.ErrorReason_ERROR_REASON_UNSPECIFIED {
			t.Errorf("reasonOf(%q) = %v, want ERROR_REASON_UNSPECIFIED", reason, got)
		}
	}
}
