package leasehold

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
)

// LeaseChange is one change of a job's lease, as Observe delivers it: Kind
// says why (EventCurrent for the state when the observation began, then
// EventAcquired, EventReleased, EventExpired, or EventValueChanged when
// the holder changed its Lease.Value) and Lease is the lease after it
// (Holder "" when the job is free). The same as a Watch's LeaseEvent.
type LeaseChange = LeaseEvent

// Observe follows job's lease (a WatchLease stream): the returned channel
// delivers the current state first, then each change as it happens (a
// grant to a new holder or a new token, a release, an expiry, a change of
// the holder's value; renewals that change no value send nothing). An observer that falls behind is not buffered without
// bound: the server folds the changes it did not read in time into the
// latest state.
//
// The channel is closed when ctx is done (cancel it to stop observing) or
// when the stream ends; wait then says why: nil when ctx ended it, else
// the typed error that broke it (an *UnavailableError matching
// ErrShuttingDown when the server stops, ErrUnavailable when the
// connection is lost, a *QuotaExceededError over --max-watchers, an
// *InvalidArgumentError for an empty job...). wait blocks until the
// channel is closed. The stream is not opened again: observe again to go
// on (the first change of a new observation is the current state, so
// nothing is missed for long).
//
//	changes, wait := client.Observe(ctx, "reports")
//	for ch := range changes {
//		log.Printf("%v: holder %q token %d", ch.Kind, ch.Lease.Holder, ch.Lease.Token)
//	}
//	if err := wait(); err != nil { /* the stream broke */ }
func (c *Client) Observe(ctx context.Context, job string) (<-chan LeaseChange, func() error) {
	changes := make(chan LeaseChange)
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		defer close(changes)
		err = c.observe(ctx, job, changes)
	}()
	return changes, func() error {
		<-done
		return err
	}
}

// observe sends job's changes on changes until ctx is done (nil) or the
// stream breaks (its error).
func (c *Client) observe(ctx context.Context, job string, changes chan<- LeaseChange) error {
	w, err := c.Watch(ctx, job)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer w.Close()
	for {
		ev, err := w.Recv()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The server ended the stream without a status: not a
				// change anyone asked for.
				return unavailable(codes.Unavailable, "the lease watch ended")
			}
			return err
		}
		select {
		case changes <- ev:
		case <-ctx.Done():
			return nil
		}
	}
}
