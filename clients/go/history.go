package leasehold

import (
	"context"
	"iter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// Tenure is one token's time as a job's leader, as the job's history
// (Client.History) records it. Its times are on the server's wall clock,
// for people (a post-mortem: which token led when a write was made); no
// rule reads them.
type Tenure struct {
	Token  uint64
	Holder string
	// Principal is the principal the grant was bound to (servers with a
	// policy); "" otherwise.
	Principal string
	// GrantedAt is when it was granted.
	GrantedAt time.Time
	// TTL is the TTL it was granted with (renewals may change it later).
	TTL time.Duration
	// End is how it ended: leaseholdv1.Tenure_END_UNSPECIFIED while it has
	// not (the holder leads now), else END_RELEASED, END_EXPIRED,
	// END_TAKEN_OVER, END_CONNECTION_CLOSED, END_TRANSFERRED, END_CHAOS...
	// (the generated enum, so that a newer server's ends come with
	// clients/generate.sh).
	End pb.Tenure_End
	// EndedAt is when it ended (the release, or the deadline that passed);
	// the zero time while it has not.
	EndedAt time.Time
	// Value is the value the grant was made with (AcquireValue,
	// ElectorConfig.Value); a later change by a renewal is not recorded
	// here.
	Value []byte
}

// Ended reports whether the tenure has ended.
func (t Tenure) Ended() bool { return t.End != pb.Tenure_END_UNSPECIFIED }

// ChaosEvent is one action of the chaos API on a job (a server started
// with --enable-chaos), as its history's first page lists them.
type ChaosEvent struct {
	// At is when, on the server's wall clock.
	At time.Time
	// Action is expire, pause, delay, fence, transfer or clear.
	Action string
	// Detail says what it did, for people ("token 3 expired on purpose").
	Detail string
}

// HistoryOptions selects a page of a job's history.
type HistoryOptions struct {
	// PageSize is the most tenures in the page; 0 is the server's default
	// (100), at most 1000.
	PageSize uint32
	// PageToken is the NextPageToken of the previous page of the same
	// job's history, or "" for the first page.
	PageToken string
}

// HistoryPage is one page of a job's history.
type HistoryPage struct {
	// Tenures, newest first.
	Tenures []Tenure
	// NextPageToken is the HistoryOptions.PageToken of the next (older)
	// page; "" on the last page.
	NextPageToken string
	// Chaos is the chaos API's actions on the job, newest first (the last
	// 32 this server took since it started): on the first page only, and
	// empty without chaos.
	Chaos []ChaosEvent
}

// History returns a page of job's history of leaders (GetHistory), newest
// first: one Tenure per token granted, with how it ended. The server keeps
// each job's newest tenures (serve --history-per-job, default 100);
// DeleteJob removes them with the job. A job with no history (never
// granted, or unknown) has an empty one, not an error. A PageToken the
// server did not issue for this job's history is an
// *InvalidArgumentError (Field "page_token"); an empty job, one with
// Field "job". HistoryAll reads every page.
func (c *Client) History(ctx context.Context, job string, opts HistoryOptions) (HistoryPage, error) {
	r, err := c.leases.GetHistory(ctx, &pb.GetHistoryRequest{Job: job, PageSize: opts.PageSize, PageToken: opts.PageToken})
	if err != nil {
		return HistoryPage{}, callError(ctx, err)
	}
	page := HistoryPage{NextPageToken: r.GetNextPageToken()}
	for _, t := range r.GetTenures() {
		page.Tenures = append(page.Tenures, tenureFromPb(t))
	}
	for _, e := range r.GetChaos() {
		page.Chaos = append(page.Chaos, ChaosEvent{At: wallTime(e.GetAt()), Action: e.GetAction(), Detail: e.GetDetail()})
	}
	return page, nil
}

// HistoryAll yields every tenure of job's history, newest first, asking
// for the pages (of pageSize tenures; 0 is the server's default) as the
// loop goes on. A failed page is yielded once as a zero Tenure with its
// error, and ends the loop:
//
//	for tenure, err := range client.HistoryAll(ctx, "reports", 0) {
//		if err != nil { return err }
//		fmt.Println(tenure.Token, tenure.Holder, tenure.End)
//	}
func (c *Client) HistoryAll(ctx context.Context, job string, pageSize uint32) iter.Seq2[Tenure, error] {
	return func(yield func(Tenure, error) bool) {
		opts := HistoryOptions{PageSize: pageSize}
		for {
			page, err := c.History(ctx, job, opts)
			if err != nil {
				yield(Tenure{}, err)
				return
			}
			for _, t := range page.Tenures {
				if !yield(t, nil) {
					return
				}
			}
			if page.NextPageToken == "" {
				return
			}
			opts.PageToken = page.NextPageToken
		}
	}
}

func tenureFromPb(t *pb.Tenure) Tenure {
	return Tenure{
		Token:     t.GetToken(),
		Holder:    t.GetHolder(),
		Principal: t.GetPrincipal(),
		GrantedAt: wallTime(t.GetGrantedAt()),
		TTL:       t.GetTtl().AsDuration(),
		End:       t.GetEnd(),
		EndedAt:   wallTime(t.GetEndedAt()),
		Value:     t.GetValue(),
	}
}

// wallTime is ts as a time.Time; the zero time when unset.
func wallTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}
