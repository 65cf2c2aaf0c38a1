package leasehold

import (
	"context"
	"errors"
	"io"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// MaxShards is the most shards a group may have.
const MaxShards = 1024

// DefaultShardTTL is a member's TTL when ShardConfig.TTL is 0.
const DefaultShardTTL = 10 * time.Second

// The backoff of a member joining again after its stream broke: from
// 100 ms, doubling, up to 1 s, so it is back within about a second of the
// server.
const (
	rejoinFirst = 100 * time.Millisecond
	rejoinMax   = time.Second
)

// How long a leaving member waits for the server to end its stream after
// closing its side (the server frees its shards then) before it cuts the
// stream.
const leaveDrain = 5 * time.Second

// ErrShardRevoked is the cause (context.Cause) of a shard's work context
// in ShardMember.Run when the shard is revoked: it is to move to another
// member, and is acknowledged once the work has returned.
var ErrShardRevoked = errors.New("leasehold: shard revoked")

// ErrShardLost is the cause (context.Cause) of a shard's work context in
// ShardMember.Run when the member lost the shard without a revoke (it ran
// out, a revoke's deadline passed, or the stream broke): its token no
// longer writes.
var ErrShardLost = errors.New("leasehold: shard lost")

// ShardConfig is how a member joins a group.
type ShardConfig struct {
	// TTL of the member's holdings; it renews them every TTL/3. 0:
	// DefaultShardTTL. Within the server's configured range.
	TTL time.Duration
	// RevokeTimeout is how long the member has to acknowledge a revoke
	// (ShardMember.Release) before the shard moves anyway, its writes then
	// fenced. 0: the TTL.
	RevokeTimeout time.Duration
}

// Shard is one shard of a group, as its member owns it.
type Shard struct {
	// Shard is its number, 0 to N-1.
	Shard uint32
	// Job is its job, "{group}/{shard}": write its state under it with
	// Token, so that a stale owner's writes are fenced.
	Job string
	// Token is its fencing token while this member owns it.
	Token uint64
}

// ShardEventKind says what the server told a member about a shard.
type ShardEventKind int

const (
	// ShardAssigned: the member owns the shard, with its token.
	ShardAssigned ShardEventKind = iota + 1
	// ShardRevoked: the shard is to move: stop its work, then Release it
	// within the event's Deadline. Until then it is still owned (its
	// token still writes).
	ShardRevoked
	// ShardLost: the member no longer owns the shard (it ran out, a
	// revoke's deadline passed, or the stream broke): stop its work. No
	// acknowledgement.
	ShardLost
)

func (k ShardEventKind) String() string {
	switch k {
	case ShardAssigned:
		return "ASSIGNED"
	case ShardRevoked:
		return "REVOKED"
	case ShardLost:
		return "LOST"
	}
	return "UNSPECIFIED"
}

// ShardEvent is one event of a member's Events.
type ShardEvent struct {
	Kind ShardEventKind
	// Shard is the shard, 0 to N-1.
	Shard uint32
	// Token: ShardAssigned, the shard's token; ShardRevoked and
	// ShardLost, the token that owned it.
	Token uint64
	// Job is the shard's job, "{group}/{shard}".
	Job string
	// Deadline (ShardRevoked only): how long, from when the server sent
	// the revoke, the member has to Release the shard.
	Deadline time.Duration
}

// Of is the shard the event is about.
func (e ShardEvent) Of() Shard { return Shard{Shard: e.Shard, Job: e.Job, Token: e.Token} }

type joinStream = grpc.BidiStreamingClient[pb.JoinRequest, pb.JoinResponse]

// ShardMember is a member of a shard group (Shards.Join): the server
// spreads the group's N shards over its live members, balanced, and
// streams this member's part on Events. Each shard is its own job,
// "{group}/{k}", with its own lease and token: write a shard's state
// under its job with its token, so a stale owner's writes are fenced
// (ErrFenced). Run does the bookkeeping: a goroutine per owned shard,
// cancelled on a revoke, and the revoke acknowledged only once the
// goroutine has returned.
//
// The member renews its holdings every TTL/3 from a goroutine of its own,
// whether or not Events is read. If the stream breaks with an error
// retrying can fix (the server restarts, the connection is cut), every
// owned shard is reported ShardLost at once, so that no work runs
// unowned, and the member joins again under the same identity (backoff
// from 100 ms to 1 s) until it leaves: the shards still its own are
// assigned again, with their tokens. Any other error (a
// *LeaseLostError: another stream joined as this member) ends the
// membership: Events is closed and Err returns it.
type ShardMember struct {
	client *Client
	member string
	shards uint32
	ttl    time.Duration
	first  *pb.JoinRequest

	// life ends the membership: Leave, or the ctx of JoinShards.
	life  context.Context
	leave context.CancelFunc

	events chan ShardEvent
	done   chan struct{} // closed once the member's goroutines have ended
	wake   chan struct{} // an acknowledgement to send

	mu    sync.Mutex
	owned map[uint32]Shard
	acks  []uint32
	err   error
}

// JoinShards joins group, of shards shards (1 to MaxShards, the same for
// every member: the first member fixes it), as a new member named name:
// its identity, Member(), is name@<uuid> with a UUID made here, so two
// members in one process are two members. It returns once the server has
// answered JOINED; the assignments then come on Events.
//
// It fails with an *InvalidArgumentError (ErrInvalidArgument) naming the
// field: "group" when empty, "shards" when 0, over MaxShards or not the
// group's count, "ttl" or "revoke_timeout" when out of range.
//
// The membership lasts until Leave, or until ctx is done (it then leaves,
// as Leave does), or until an error ends it.
func (c *Client) JoinShards(ctx context.Context, group, name string, shards uint32, cfg ShardConfig) (*ShardMember, error) {
	switch {
	case group == "":
		return nil, invalidArgument("group", "the group must not be empty")
	case shards == 0 || shards > MaxShards:
		return nil, invalidArgument("shards", "a group has 1 to 1024 shards")
	case cfg.TTL < 0:
		return nil, invalidArgument("ttl", "the TTL must be positive")
	case cfg.RevokeTimeout < 0:
		return nil, invalidArgument("revoke_timeout", "the revoke timeout must be positive")
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultShardTTL
	}
	first := &pb.JoinRequest{Group: group, Member: electorHolder(name), Shards: shards, Ttl: dur(ttl)}
	if cfg.RevokeTimeout > 0 {
		first.RevokeTimeout = dur(cfg.RevokeTimeout)
	}
	life, leave := context.WithCancel(ctx)
	m := &ShardMember{client: c, member: first.Member, shards: shards, ttl: ttl, first: first,
		life: life, leave: leave, events: make(chan ShardEvent, 64), done: make(chan struct{}),
		wake: make(chan struct{}, 1), owned: map[uint32]Shard{}}
	st, cut, err := m.open(ctx)
	if err != nil {
		leave()
		return nil, err
	}
	go m.session(st, cut)
	return m, nil
}

func invalidArgument(field, msg string) error {
	return &InvalidArgumentError{Message: msg, Field: field, status: status.New(codes.InvalidArgument, msg)}
}

// Member is this member's identity, name@<uuid>: the holder of its
// shards' leases.
func (m *ShardMember) Member() string { return m.member }

// Shards is the group's count of shards.
func (m *ShardMember) Shards() uint32 { return m.shards }

// Events delivers what the server tells this member: ShardAssigned,
// ShardRevoked (stop the shard's work, then Release it), ShardLost (stop
// its work). It is closed when the membership ends: after Leave (or the
// JoinShards ctx done), Err is nil; after an error, Err has it. Read it
// (or use Run, which does): the member's renewals go on meanwhile, but
// the server's later events wait.
func (m *ShardMember) Events() <-chan ShardEvent { return m.events }

// Err is the error that ended the membership, once Events is closed: nil
// when it left. Typed as every error of this package: a *LeaseLostError
// (ErrLeaseLost) when another stream joined as this member, a
// *PermissionDeniedError when a policy refuses it...
func (m *ShardMember) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Release acknowledges a revoke: the shard's work has stopped, and it may
// move. It does not wait; a shard not being revoked is ignored.
func (m *ShardMember) Release(shard uint32) {
	m.mu.Lock()
	m.acks = append(m.acks, shard)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Leave leaves the group: it closes its side of the stream, and the server
// gives every shard of this member to the others at once. It returns once
// the server has ended the stream (or after 5 s). Events is then closed.
// Safe to call more than once, and from any goroutine.
func (m *ShardMember) Leave() {
	m.leave()
	<-m.done
}

// Run runs work for each shard while this member owns it, each in its own
// goroutine with its own context, until ctx is done or the membership
// ends; then it cancels every work, waits until each has returned, and
// leaves. It returns Err(): nil when ctx ended it (or Leave was called).
//
// On a revoke, the shard's work context is cancelled (its cause,
// context.Cause, is ErrShardRevoked) and the revoke is acknowledged only
// once work has returned: no shard's work runs on once it has moved. On a
// loss, it is cancelled with ErrShardLost. A shard assigned again starts
// once its previous work has returned. Work must return promptly once its
// context is done: a revoke unacknowledged by its deadline moves the
// shard anyway, and the member is told ShardLost. Do not read Events
// while Run does.
func (m *ShardMember) Run(ctx context.Context, work func(ctx context.Context, s Shard)) error {
	type running struct {
		cancel context.CancelCauseFunc
		done   chan struct{}
	}
	var all sync.WaitGroup
	works := map[uint32]*running{}
	// last[k] is closed once shard k's latest work has returned.
	last := map[uint32]chan struct{}{}
	stop := func(k uint32, cause error) {
		if r := works[k]; r != nil {
			delete(works, k)
			r.cancel(cause)
		}
	}
	defer func() {
		for k := range works {
			stop(k, context.Canceled)
		}
		all.Wait()
		m.Leave()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-m.events:
			if !ok {
				return m.Err()
			}
			k := ev.Shard
			switch ev.Kind {
			case ShardAssigned:
				stop(k, ErrShardLost)
				wctx, cancel := context.WithCancelCause(ctx)
				r := &running{cancel: cancel, done: make(chan struct{})}
				prev := last[k]
				works[k], last[k] = r, r.done
				all.Add(1)
				go func() {
					defer all.Done()
					defer close(r.done)
					if prev != nil {
						<-prev
					}
					work(wctx, ev.Of())
				}()
			case ShardRevoked:
				// The acknowledgement waits for the shard's latest work
				// (ended already, or ending) in a goroutine of its own,
				// so that other shards' events go on.
				stop(k, ErrShardRevoked)
				ended := last[k]
				all.Add(1)
				go func() {
					defer all.Done()
					if ended != nil {
						<-ended
					}
					m.Release(k)
				}()
			case ShardLost:
				stop(k, ErrShardLost)
			}
		}
	}
}

// open opens a Join stream, sends the first message and waits for JOINED
// (or the refusal); ctx bounds the wait. The stream itself lives until
// cut is called (not ctx): a member leaves by closing its side, which a
// cancelled ctx would not let it do.
func (m *ShardMember) open(ctx context.Context) (joinStream, context.CancelFunc, error) {
	sctx, cut := context.WithCancel(context.WithoutCancel(ctx))
	giveUp := context.AfterFunc(ctx, cut)
	fail := func(err error) (joinStream, context.CancelFunc, error) {
		giveUp()
		cut()
		return nil, nil, callError(ctx, err)
	}
	st, err := m.client.shards.Join(sctx)
	if err != nil {
		return fail(err)
	}
	if err := st.Send(m.first); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream has ended: Recv has its status.
			_, err = st.Recv()
		}
		return fail(joinError(err))
	}
	r, err := st.Recv()
	if err != nil {
		return fail(joinError(err))
	}
	if !giveUp() {
		return fail(ctx.Err())
	}
	if r.GetKind() != pb.JoinResponse_KIND_JOINED {
		cut()
		return nil, nil, unavailable(codes.Unavailable, "the server answered a Join with "+r.GetKind().String()+", not JOINED")
	}
	return st, cut, nil
}

// joinError is the error of a Join stream that ended (err from Send or
// Recv): io.EOF, a stream the server ended with no status, is unavailable.
func joinError(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return unavailable(codes.Unavailable, "the server ended the Join stream")
	}
	return err
}

// session is the member's goroutine: it serves the stream, joins again
// after a break that retrying can fix, and closes Events at the end.
func (m *ShardMember) session(st joinStream, cut context.CancelFunc) {
	defer close(m.done)
	defer close(m.events)
	defer m.leave()
	for {
		err := m.serve(st, cut)
		if err == nil {
			return
		}
		// Stop every shard's work: it may move while the stream is down.
		m.loseAll()
		if !Retryable(err) {
			m.fail(err)
			return
		}
		// Join again under the same identity, until the member leaves.
		backoff := rejoinFirst
		for {
			select {
			case <-m.life.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, rejoinMax)
			st, cut, err = m.open(m.life)
			if err == nil {
				break
			}
			if m.life.Err() != nil {
				return
			}
			if !Retryable(err) {
				m.fail(err)
				return
			}
		}
	}
}

func (m *ShardMember) fail(err error) {
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// serve sends the member's renewals and acknowledgements on st while a
// goroutine reads the server's events, until the member leaves (nil) or
// the stream breaks (its error).
func (m *ShardMember) serve(st joinStream, cut context.CancelFunc) error {
	defer cut()
	broke := make(chan error, 1)
	go func() { broke <- m.read(st) }()
	beat := time.NewTicker(max(m.ttl/3, time.Millisecond))
	defer beat.Stop()
	// After a failed Send the stream has ended: the reader has its error.
	sending := true
	send := func(req *pb.JoinRequest) {
		if sending && st.Send(req) != nil {
			sending = false
		}
	}
	for {
		select {
		case err := <-broke:
			if m.life.Err() != nil {
				return nil
			}
			return err
		case <-m.wake:
			m.mu.Lock()
			released := m.acks
			m.acks = nil
			for _, k := range released {
				delete(m.owned, k)
			}
			m.mu.Unlock()
			if len(released) > 0 {
				send(&pb.JoinRequest{Released: released})
			}
		case <-beat.C:
			// Every message renews the member's holdings.
			send(&pb.JoinRequest{})
		case <-m.life.Done():
			// Leaving: closing our side frees the shards at once; the
			// server then ends the stream.
			_ = st.CloseSend()
			select {
			case <-broke:
			case <-time.After(leaveDrain):
				cut()
				<-broke
			}
			return nil
		}
	}
}

// read delivers the server's events until the stream ends (its error).
// Once the member leaves, the rest is read and dropped, so that the
// stream ends as the server ends it.
func (m *ShardMember) read(st joinStream) error {
	for {
		r, err := st.Recv()
		if err != nil {
			return FromError(joinError(err))
		}
		ev, ok := m.told(r)
		if !ok {
			continue
		}
		select {
		case m.events <- ev:
		case <-m.life.Done():
		}
	}
}

// told keeps the owned shards up to date with one message from the
// server, and says which event it is for the user, if any: an ASSIGNED
// the member already has (sent again after it joined again) is not one,
// nor a LOST for a shard it no longer owns (already reported).
func (m *ShardMember) told(r *pb.JoinResponse) (ShardEvent, bool) {
	ev := ShardEvent{Shard: r.GetShard(), Token: r.GetToken(), Job: r.GetJob()}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch r.GetKind() {
	case pb.JoinResponse_KIND_ASSIGNED:
		ev.Kind = ShardAssigned
		if m.owned[ev.Shard] == ev.Of() {
			return ev, false
		}
		m.owned[ev.Shard] = ev.Of()
	case pb.JoinResponse_KIND_REVOKED:
		ev.Kind = ShardRevoked
		ev.Deadline = r.GetDeadline().AsDuration()
	case pb.JoinResponse_KIND_LOST:
		ev.Kind = ShardLost
		if _, ok := m.owned[ev.Shard]; !ok {
			return ev, false
		}
		delete(m.owned, ev.Shard)
	default:
		return ev, false
	}
	return ev, true
}

// loseAll reports every owned shard lost, in order: the stream broke.
func (m *ShardMember) loseAll() {
	m.mu.Lock()
	var lost []Shard
	for _, s := range m.owned {
		lost = append(lost, s)
	}
	m.owned = map[uint32]Shard{}
	m.acks = nil
	m.mu.Unlock()
	sort.Slice(lost, func(i, j int) bool { return lost[i].Shard < lost[j].Shard })
	for _, s := range lost {
		select {
		case m.events <- ShardEvent{Kind: ShardLost, Shard: s.Shard, Token: s.Token, Job: s.Job}:
		case <-m.life.Done():
			return
		}
	}
}

// ShardGroup is a group as GetGroup shows it.
type ShardGroup struct {
	Group string
	// Shards is the group's count of shards; 0 when it has none (never
	// joined).
	Shards uint32
	// Members are its live members.
	Members []ShardGroupMember
	// Owners has every shard, in order, with its owner if any.
	Owners []ShardOwner
}

// ShardGroupMember is one live member of a group.
type ShardGroupMember struct {
	// Member is its identity, as it joined (ShardMember.Member).
	Member string
	// Shards are the shards it owns, in order.
	Shards []uint32
}

// ShardOwner is one shard of a group and its owner.
type ShardOwner struct {
	Shard uint32
	// Job is the shard's job, "{group}/{shard}".
	Job string
	// Member owns it; "" when nobody does.
	Member string
	// Token is its newest token (0 when never owned).
	Token uint64
}

// GetGroup shows group: its count of shards, its live members and who
// owns each shard. A group never joined has Shards 0. With a policy it
// needs read on the group's job.
func (c *Client) GetGroup(ctx context.Context, group string) (ShardGroup, error) {
	r, err := c.shards.GetGroup(ctx, &pb.GetGroupRequest{Group: group})
	if err != nil {
		return ShardGroup{}, callError(ctx, err)
	}
	g := ShardGroup{Group: r.GetGroup(), Shards: r.GetShards()}
	for _, mb := range r.GetMembers() {
		g.Members = append(g.Members, ShardGroupMember{Member: mb.GetMember(), Shards: mb.GetShards()})
	}
	for _, o := range r.GetOwners() {
		g.Owners = append(g.Owners, ShardOwner{Shard: o.GetShard(), Job: o.GetJob(), Member: o.GetMember(), Token: o.GetToken()})
	}
	return g, nil
}
