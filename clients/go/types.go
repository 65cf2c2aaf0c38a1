package leasehold

import (
	"crypto/rand"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

var processUUID = newUUID()

func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ProcessHolder returns a holder identity for this process: name@uuid, with
// one UUID made at process start. A restarted process is a new holder,
// never mistaken for the old one. For one-off calls: an Elector never uses
// it (see electorHolder).
func ProcessHolder(name string) string { return name + "@" + processUUID }

// electorHolder returns a fresh holder identity for one elector: name@uuid,
// with a UUID made by this call. Two electors for one job in one process
// are then two holders to the server: at most one leads, each with its own
// tokens.
func electorHolder(name string) string { return name + "@" + newUUID() }

// Lease is a job's lease, as the server reported it.
type Lease struct {
	Job string
	// Holder is the live holder, "" when the job is free.
	Holder string
	// Token is the newest token; 0 if never granted.
	Token uint64
	// TTL of the live grant; 0 when free.
	TTL time.Duration
	// Remaining is the time left when the server answered; 0 when free.
	Remaining time.Duration
	// Principal is the principal of the server's policy that holds the
	// lease; "" without a policy or when free.
	Principal string
	// Proof is the grant's proof: a statement signed by the server (a JWS,
	// docs/proofs.md) that it issued Token of Job to Holder. Storage that leasehold does not
	// own verifies it with VerifyProof and the keys of Client.SigningKeys
	// before comparing tokens; CheckedWrite takes it instead of the token
	// (WithProof). It proves that the token was issued, not that the lease
	// is still live. The same for every answer about one grant (renewals
	// keep it); "" when the job is free, when the caller may not see the
	// token, or when the server signs nothing (etcd mode without
	// --signing-key).
	Proof string
	// Value is what the holder published with its grant (AcquireValue,
	// ElectorConfig.Value) or its last renewal that set one (RenewValue,
	// Elector.SetValue): where to reach the leader, say its address, for
	// routing requests to it. At most 1024 bytes; empty when the job is
	// free or the holder published nothing. Advisory: it says who the
	// holder said it is, not that it still leads. The token fences, not
	// the value.
	Value []byte
	// Slot is, in the answer to a counted Acquire (AcquireSlots), the
	// slot granted, 0 to Slots-1, whose own job Job names
	// ("{job}#{slot}"). 0 elsewhere, as Slots is.
	Slot uint32
	// Slots is, in the answer to a counted Acquire, the job's count of
	// slots; 0 elsewhere (GetLease, watches and KeepAlive answer about a
	// slot's job as about any job).
	Slots uint32
}

// Counted reports whether the lease is a slot of a counted lease, as the
// answer to a counted Acquire says (Slots > 0): Job is then the slot's
// own job, "{job}#{slot}".
func (l Lease) Counted() bool { return l.Slots > 0 }

// Acquired is the answer to Acquire.
type Acquired struct {
	// Acquired reports whether we hold the lease now.
	Acquired bool
	// Lease is ours when acquired, else the current holder's.
	Lease Lease
}

// AcquireOption is an option of Client.Acquire.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	bindToStream bool
	preferred    bool
	value        []byte
	slots        uint32
}

// MaxSlots is the most slots a counted lease may have (AcquireSlots): more
// is an *InvalidArgumentError with Field "slots".
const MaxSlots = 100

// AcquireSlots(n) asks for one of n slots of a counted lease on the job
// (a semaphore, AcquireRequest.slots): up to n holders at once, each in a
// slot of its own, 2 to MaxSlots. 0 or 1 is the ordinary lease.
//
// Slot k is a job of its own, "{job}#{k}", with its own token, history
// and fenced keys. The grant's Lease.Job names it and Lease.Slot is k:
// renew, release, transfer and write (CheckedWrite, WriteStream) with
// Lease.Job, not with the job asked for. The line is first come, first
// served: a slot that frees goes to the first waiter. A live holder of a
// slot that asks again is renewed in its slot.
//
// The count is fixed by the job's first counted grant: an Acquire naming
// another count is an *InvalidArgumentError with Field "slots" (its
// message says the job's count), and changes nothing; so is n over
// MaxSlots. While the first waiter waits, the server holds the job's own
// lease for it (the line's turn): GetLease(job) then shows that waiter,
// not a slot's holder; GetLease("{job}#{k}") shows slot k's.
func AcquireSlots(n uint32) AcquireOption {
	return func(o *acquireOptions) { o.slots = n }
}

// MaxValueBytes is the most a lease's value may hold (Lease.Value): a
// longer one is an *InvalidArgumentError with Field "value", and nothing
// changes.
const MaxValueBytes = 1024

// AcquireValue(v) publishes v with the grant (AcquireRequest.value): the
// lease's Value, which GetLease, watchers and the job's history show, so
// that others can route to the leader (its address, say). At most
// MaxValueBytes. An Acquire of the live holder replaces the value (an
// Acquire without one clears it). Advisory: the token fences, not the
// value.
func AcquireValue(v []byte) AcquireOption {
	return func(o *acquireOptions) { o.value = v }
}

// BindToStream(true) binds the grant to the client's connection
// (AcquireRequest.bind_to_stream): when this end of the connection closes
// or resets (Client.Close, or the process dies and its kernel closes the
// socket), the server releases the lease at once and the first waiting
// Acquire is granted the next token; the job's history records the
// tenure's end as CONNECTION_CLOSED. A connection that merely goes silent
// (a paused process, a partition) releases nothing: the lease runs for
// its TTL as usual.
//
// The trade: a live holder whose connection is cut (a proxy or load
// balancer that closes it, the connection breaking and grpc-go
// reconnecting, grpc-go closing a connection idle past its idle timeout)
// loses its lease at once, and its writes are then fenced. The default is
// false.
func BindToStream(on bool) AcquireOption {
	return func(o *acquireOptions) { o.bindToStream = on }
}

// Preferred(true) asks as a preferred candidate
// (AcquireRequest.preferred): a waiting Acquire that says preferred is
// queued ahead of those that do not (within each class the line stays
// first come, first served). While it waits and the live grant is not a
// preferred one, the holder is told so in every renewal
// (Renewed.SuccessorWaiting), so that it can hand over (TransferLease to
// the first in line) when it suits it. Nothing is taken from the holder:
// the lease changes hands only as before. The default is false.
func Preferred(on bool) AcquireOption {
	return func(o *acquireOptions) { o.preferred = on }
}

// RenewOption is an option of Client.Renew and Client.RenewLease.
type RenewOption func(*renewOptions)

type renewOptions struct {
	value []byte // nil: keep the lease's value
}

// RenewValue(v) replaces the lease's value (Lease.Value) with v
// (RenewRequest.value); an empty or nil v clears it. A renewal without it
// keeps the value. The change is durable before the answer, and watchers
// see it (EventValueChanged). At most MaxValueBytes.
func RenewValue(v []byte) RenewOption {
	return func(o *renewOptions) {
		// A non-nil slice is a set field, even when empty (it clears).
		o.value = append([]byte{}, v...)
	}
}

// WriteOption is an option of Client.CheckedWrite and Client.Delete.
type WriteOption func(*writeOptions)

type writeOptions struct {
	proof string
}

// WithProof(proof) fences the write with a grant's proof (Lease.Proof)
// instead of its token (CheckedWriteRequest.proof): the server verifies
// the proof with its own keys, takes the token from it and fences the
// write exactly as with that token. The token argument may then be 0; if
// it is not, it must be the proof's. The proof's job must be the write's.
// So a service that is not the holder can forward the holder's write
// (it needs write on the job; the grant's principal must be the
// proof's). A proof that does not verify is an *InvalidArgumentError
// (Field "proof"); a valid proof of a token that is not the job's live
// one is a *FencedError, as with the token.
func WithProof(proof string) WriteOption {
	return func(o *writeOptions) { o.proof = proof }
}

// Renewed is the answer to RenewLease.
type Renewed struct {
	// Lease is our lease, renewed.
	Lease Lease
	// SuccessorWaiting: a preferred candidate (an Acquire with
	// Preferred(true)) waits for the job, and our grant is not a
	// preferred one. Nothing is taken from us: hand over (TransferLease to
	// the first in line, "") when it suits.
	SuccessorWaiting bool
}

// Value is a stored value.
type Value struct {
	// Found is false when never written or deleted.
	Found bool
	Value []byte
	// Token of the write that stored it.
	Token uint64
	// Version of the key; 0 if never written.
	Version uint64
}

// KeyInfo describes one live key.
type KeyInfo struct {
	Key     []byte
	Token   uint64
	Version uint64
	Size    uint32
}

// EventKind says why a watch event was sent.
type EventKind int

const (
	EventUnspecified EventKind = iota
	EventCurrent
	EventAcquired
	EventReleased
	EventExpired
	// EventValueChanged: the holder changed the lease's value (a renewal
	// with RenewValue, Elector.SetValue, or its repeated Acquire with
	// another value): the same holder and token. Not a new leader.
	EventValueChanged
)

func (k EventKind) String() string {
	switch k {
	case EventCurrent:
		return "CURRENT"
	case EventAcquired:
		return "ACQUIRED"
	case EventReleased:
		return "RELEASED"
	case EventExpired:
		return "EXPIRED"
	case EventValueChanged:
		return "VALUE_CHANGED"
	}
	return "UNSPECIFIED"
}

// LeaseEvent is one event of a watch: the lease after a change.
type LeaseEvent struct {
	Kind  EventKind
	Lease Lease
}

func leaseFromPb(l *pb.Lease) Lease {
	return Lease{
		Job:       l.GetJob(),
		Holder:    l.GetHolder(),
		Token:     l.GetToken(),
		TTL:       l.GetTtl().AsDuration(),
		Remaining: l.GetRemaining().AsDuration(),
		Principal: l.GetPrincipal(),
		Proof:     l.GetProof(),
		Value:     l.GetValue(),
		Slot:      l.GetSlot(),
		Slots:     l.GetSlots(),
	}
}

func eventFromPb(e *pb.LeaseEvent) LeaseEvent {
	kind := EventUnspecified
	switch e.GetKind() {
	case pb.LeaseEvent_KIND_CURRENT:
		kind = EventCurrent
	case pb.LeaseEvent_KIND_ACQUIRED:
		kind = EventAcquired
	case pb.LeaseEvent_KIND_RELEASED:
		kind = EventReleased
	case pb.LeaseEvent_KIND_EXPIRED:
		kind = EventExpired
	case pb.LeaseEvent_KIND_VALUE_CHANGED:
		kind = EventValueChanged
	}
	return LeaseEvent{Kind: kind, Lease: leaseFromPb(e.GetLease())}
}

func dur(d time.Duration) *durationpb.Duration {
	if d < 0 {
		d = 0
	}
	return durationpb.New(d)
}
