package leasehold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// The most writes the client puts in one WriteStream message (the server
// takes up to 1000), and the most encoded bytes, unless a single write is
// larger: well under the server's default message limit of about 66 KiB.
const (
	maxWritesPerMessage = 1000
	maxMessageBytes     = 48 * 1024
)

// StreamWrite is one write on a WriteStream: the fields of CheckedWrite.
// Make one with Put or Delete, or fill in the fields.
type StreamWrite struct {
	// Job is the job whose token fences Key.
	Job string
	// Token is the writer's token, from its grant.
	Token uint64
	// Key is the key: 1 byte to 1 KiB by default.
	Key []byte
	// Value is the value to store, up to 64 KiB by default. Ignored when
	// Delete is set.
	Value []byte
	// Delete deletes the key instead of storing Value.
	Delete bool
}

// Put returns the write that stores value under (job, key) with token.
func Put(job string, token uint64, key, value []byte) StreamWrite {
	return StreamWrite{Job: job, Token: token, Key: key, Value: value}
}

// Delete returns the write that deletes (job, key) with token.
func Delete(job string, token uint64, key []byte) StreamWrite {
	return StreamWrite{Job: job, Token: token, Key: key, Delete: true}
}

func (w StreamWrite) toPb() *pb.CheckedWriteRequest {
	r := &pb.CheckedWriteRequest{Job: w.Job, Token: w.Token, Key: w.Key, Delete: w.Delete}
	if !w.Delete {
		r.Value = w.Value
	}
	return r
}

// OutcomeKind says what became of one write on a WriteStream.
type OutcomeKind int

const (
	// OutcomeUnspecified is the zero value; Write never returns it.
	OutcomeUnspecified OutcomeKind = iota
	// OutcomeWritten: stored durably; Version is the key's new version.
	OutcomeWritten
	// OutcomeFenced: the token is not the job's live token, as for
	// ErrFenced. The writer is not the leader and must stop. Nothing was
	// written; CurrentToken is the job's newest token.
	OutcomeFenced
	// OutcomeUnknownToken: the server never issued the token for the job,
	// as for ErrUnknownToken. Nothing was written; CurrentToken is the
	// job's newest token.
	OutcomeUnknownToken
	// OutcomeInvalidArgument: the write is malformed. Nothing was written;
	// Field names the field at fault and Message the limit.
	OutcomeInvalidArgument
	// OutcomeQuotaExceeded: the write would add a key to a job at its
	// limit of keys (--max-keys-per-job, named in Message), as for
	// ErrQuotaExceeded. Nothing was written.
	OutcomeQuotaExceeded
)

func (k OutcomeKind) String() string {
	switch k {
	case OutcomeWritten:
		return "WRITTEN"
	case OutcomeFenced:
		return "FENCED"
	case OutcomeUnknownToken:
		return "UNKNOWN_TOKEN"
	case OutcomeInvalidArgument:
		return "INVALID_ARGUMENT"
	case OutcomeQuotaExceeded:
		return "QUOTA_EXCEEDED"
	}
	return "UNSPECIFIED"
}

// WriteOutcome is the outcome of one write on a WriteStream. Branch on
// Kind (or Err), not on Message.
type WriteOutcome struct {
	Kind OutcomeKind
	// Version is the key's new version (OutcomeWritten only).
	Version uint64
	// CurrentToken is the job's newest token (OutcomeFenced and
	// OutcomeUnknownToken only).
	CurrentToken uint64
	// Field is the field at fault: "job", "token", "key" or "value"
	// (OutcomeInvalidArgument only).
	Field string
	// Message explains, in words, why the write was not made.
	Message string
}

// Written reports whether the write was made.
func (o WriteOutcome) Written() bool { return o.Kind == OutcomeWritten }

// Err returns nil for a write that was made, else the typed error
// CheckedWrite returns in the same case: a *FencedError (ErrFenced), an
// *UnknownTokenError (ErrUnknownToken), an *InvalidArgumentError
// (ErrInvalidArgument) or a *QuotaExceededError (ErrQuotaExceeded; the
// outcome carries no Limit and Max: its Message names the limit).
func (o WriteOutcome) Err() error {
	switch o.Kind {
	case OutcomeWritten:
		return nil
	case OutcomeFenced:
		return &FencedError{Message: o.Message, CurrentToken: o.CurrentToken,
			status: status.New(codes.FailedPrecondition, o.Message)}
	case OutcomeUnknownToken:
		return &UnknownTokenError{Message: o.Message, CurrentToken: o.CurrentToken,
			status: status.New(codes.InvalidArgument, o.Message)}
	case OutcomeInvalidArgument:
		return &InvalidArgumentError{Message: o.Message, Field: o.Field,
			status: status.New(codes.InvalidArgument, o.Message)}
	case OutcomeQuotaExceeded:
		return &QuotaExceededError{Message: o.Message,
			status: status.New(codes.ResourceExhausted, o.Message)}
	}
	return status.Error(codes.Internal, "write outcome has no kind")
}

func outcomeFromPb(r *pb.WriteResult) (WriteOutcome, error) {
	switch r.GetOutcome() {
	case pb.WriteResult_OUTCOME_WRITTEN:
		return WriteOutcome{Kind: OutcomeWritten, Version: r.GetVersion()}, nil
	case pb.WriteResult_OUTCOME_FENCED:
		return WriteOutcome{Kind: OutcomeFenced, CurrentToken: r.GetCurrentToken(), Message: r.GetMessage()}, nil
	case pb.WriteResult_OUTCOME_UNKNOWN_TOKEN:
		return WriteOutcome{Kind: OutcomeUnknownToken, CurrentToken: r.GetCurrentToken(), Message: r.GetMessage()}, nil
	case pb.WriteResult_OUTCOME_INVALID_ARGUMENT:
		return WriteOutcome{Kind: OutcomeInvalidArgument, Field: r.GetField(), Message: r.GetMessage()}, nil
	case pb.WriteResult_OUTCOME_QUOTA_EXCEEDED:
		return WriteOutcome{Kind: OutcomeQuotaExceeded, Message: r.GetMessage()}, nil
	}
	return WriteOutcome{}, status.Errorf(codes.Internal, "write result has no outcome (%v)", r.GetOutcome())
}

// WriteStream is one open FencedStore.WriteStream: fenced writes over one
// long-lived stream. A message on an open stream costs far less than a
// unary CheckedWrite, and the writes of one message share one sync.
//
// A WriteStream is safe for concurrent use by several goroutines, and
// their Writes are pipelined: a Write sends its messages without waiting
// for the answers to earlier ones. A lock keeps each Write's messages
// together and in order on the stream, and records them in a queue; one
// goroutine receives the responses, which the server sends in request
// order, and hands each to the Write at the head of the queue after
// checking that its id and number of results match the request.
//
// When the stream ends with an error (a full disk, a failed sync, the
// server shutting down, a broken connection), the stream is broken: every
// Write waiting for an answer and every later Write returns that error,
// typed as for unary calls (see FromError). The writes the stream did not
// answer may or may not have been made: open a new stream and read them
// back.
//
// Call Close when done, or cancel the context given to Client.WriteStream.
type WriteStream struct {
	stream grpc.BidiStreamingClient[pb.WriteStreamRequest, pb.WriteStreamResponse]
	cancel context.CancelFunc
	// done is closed once the receiving goroutine has ended.
	done chan struct{}

	// sendMu serializes Send and CloseSend, so that one Write's messages
	// go out together and in the order of their ids. The receiver never
	// takes it: a Send blocked on flow control cannot stop the responses.
	sendMu sync.Mutex

	mu      sync.Mutex
	nextID  uint64
	pending []*pending // sent and not yet answered, in order
	closed  bool       // Close was called
	err     error      // once set, what every later Write returns
	clean   bool       // the stream ended normally, after Close
}

// pending is one message sent and waiting for its response.
type pending struct {
	id    uint64
	n     int
	reply chan reply // buffered: the receiver never waits for the Write
}

type reply struct {
	results []*pb.WriteResult
	err     error
}

// WriteStream opens a WriteStream. The stream lives until Close, until ctx
// is done, or until it breaks; ctx bounds it, and each Write's own context
// bounds only that Write.
func (c *Client) WriteStream(ctx context.Context) (*WriteStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := c.store.WriteStream(ctx)
	if err != nil {
		cancel()
		return nil, FromError(err)
	}
	s := &WriteStream{stream: st, cancel: cancel, done: make(chan struct{})}
	go s.receive()
	return s, nil
}

// Write makes every write in writes, in order, and returns one outcome per
// write, in the same order, once the written ones are durable. Each write
// is decided on its own, with the rules of CheckedWrite: a fenced or
// malformed write does not stop the others, and a later write sees the
// earlier ones (two writes to one key get versions n and n+1).
//
// Writes are split across messages of at most 1000 writes and about 48
// KiB (a larger write goes alone), all sent at once (pipelined); an empty
// slice is one empty message, answered with no outcomes.
//
// An error means no outcomes: either the stream is broken (see
// WriteStream; every later Write returns the same error), or ctx was done
// before the answers came (an *UnavailableError with code Canceled or
// DeadlineExceeded; the stream stays usable and drops the late answers).
// In both cases the writes may or may not have been made: read them back.
func (s *WriteStream) Write(ctx context.Context, writes []StreamWrite) ([]WriteOutcome, error) {
	if err := ctx.Err(); err != nil {
		return nil, FromError(status.FromContextError(err).Err())
	}
	reqs := make([]*pb.CheckedWriteRequest, len(writes))
	for i, w := range writes {
		reqs[i] = w.toPb()
	}
	sent, err := s.send(split(reqs))
	if err != nil {
		return nil, err
	}
	out := make([]WriteOutcome, 0, len(writes))
	for _, p := range sent {
		select {
		case r := <-p.reply:
			if r.err != nil {
				return nil, r.err
			}
			for _, res := range r.results {
				o, err := outcomeFromPb(res)
				if err != nil {
					return nil, err
				}
				out = append(out, o)
			}
		case <-ctx.Done():
			return nil, FromError(status.FromContextError(ctx.Err()).Err())
		}
	}
	return out, nil
}

// send queues and sends msgs, in order, and returns their pending entries.
// An error means nothing was sent.
func (s *WriteStream) send(msgs [][]*pb.CheckedWriteRequest) ([]*pending, error) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	sent := make([]*pending, 0, len(msgs))
	for _, m := range msgs {
		s.mu.Lock()
		if err := s.err; err != nil || s.closed {
			s.mu.Unlock()
			if len(sent) > 0 {
				// Broken meanwhile: the queued messages get the error.
				return sent, nil
			}
			if err == nil {
				err = closedError()
			}
			return nil, err
		}
		s.nextID++
		// Queued before it is sent, so that its response finds it.
		p := &pending{id: s.nextID, n: len(m), reply: make(chan reply, 1)}
		s.pending = append(s.pending, p)
		s.mu.Unlock()
		sent = append(sent, p)
		if err := s.stream.Send(&pb.WriteStreamRequest{Id: p.id, Writes: m}); err != nil {
			if !errors.Is(err, io.EOF) {
				// Our own failure (encoding, size): grpc ends the stream.
				s.fail(FromError(err))
			}
			// On io.EOF the stream has ended and the receiver gets its
			// status: it answers every queued message with it.
			break
		}
	}
	return sent, nil
}

// receive hands each response to the message it answers, in order, until
// the stream ends.
func (s *WriteStream) receive() {
	defer close(s.done)
	defer s.cancel()
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.end(err)
			return
		}
		s.mu.Lock()
		var p *pending
		if len(s.pending) > 0 {
			p = s.pending[0]
			s.pending[0] = nil
			s.pending = s.pending[1:]
		}
		s.mu.Unlock()
		if p == nil || resp.GetId() != p.id || len(resp.GetResults()) != p.n {
			err := status.Errorf(codes.Internal, "write response %d with %d results does not answer the next request (%s)",
				resp.GetId(), len(resp.GetResults()), describe(p))
			if p != nil {
				p.reply <- reply{err: err}
			}
			s.fail(err)
			return
		}
		p.reply <- reply{results: resp.GetResults()}
	}
}

func describe(p *pending) string {
	if p == nil {
		return "none is waiting"
	}
	return fmt.Sprintf("request %d with %d writes", p.id, p.n)
}

// end records how the stream ended: err from Recv.
func (s *WriteStream) end(err error) {
	eof := errors.Is(err, io.EOF)
	s.mu.Lock()
	if eof && s.err == nil && len(s.pending) == 0 {
		s.clean = s.closed
		s.err = closedError()
		if !s.closed {
			s.err = unavailable(codes.Unavailable, "write stream ended")
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if eof {
		err = unavailable(codes.Unavailable, "write stream ended before answering every request")
	} else {
		err = FromError(err)
	}
	s.fail(err)
}

// fail breaks the stream with err (unless it is already broken) and
// answers every queued message with the error.
func (s *WriteStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	err = s.err
	queued := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, p := range queued {
		p.reply <- reply{err: err}
	}
	s.cancel()
}

// Close closes the sending side and waits for the stream to end: the
// server answers every message sent before, so Writes waiting in other
// goroutines get their outcomes. Later Writes fail with an
// *UnavailableError. Close returns nil when the stream ended normally,
// else the error it broke with. It waits as long as the context given to
// Client.WriteStream allows.
func (s *WriteStream) Close() error {
	s.sendMu.Lock()
	s.mu.Lock()
	first := !s.closed && s.err == nil
	s.closed = true
	s.mu.Unlock()
	if first {
		_ = s.stream.CloseSend()
	}
	s.sendMu.Unlock()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clean {
		return nil
	}
	return s.err
}

func closedError() error { return unavailable(codes.Canceled, "write stream closed") }

func unavailable(code codes.Code, msg string) error {
	return &UnavailableError{Message: msg, Code: code, status: status.New(code, msg)}
}

// split splits writes into messages of at most maxWritesPerMessage writes
// and about maxMessageBytes encoded bytes (a larger write goes alone). No
// writes is one empty message.
func split(writes []*pb.CheckedWriteRequest) [][]*pb.CheckedWriteRequest {
	out := [][]*pb.CheckedWriteRequest{nil}
	bytes := 0
	for _, w := range writes {
		// The write, its tag and its length prefix.
		n := proto.Size(w) + 4
		cur := out[len(out)-1]
		if len(cur) > 0 && (len(cur) == maxWritesPerMessage || bytes+n > maxMessageBytes) {
			out = append(out, nil)
			bytes = 0
		}
		bytes += n
		out[len(out)-1] = append(out[len(out)-1], w)
	}
	return out
}
