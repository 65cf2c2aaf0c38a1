package leasehold_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// Client.History and HistoryAll against a real server: several tenures,
// newest first, with how each ended; paging; the first page's chaos
// events; errors.
func TestHistoryPagesNewestFirst(t *testing.T) {
	s := startServer(t, "--enable-chaos")
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("history")
	before := time.Now().Add(-time.Minute) // the server's wall clock, give or take
	// Token 1: a released; token 2: b, expired on purpose; token 3: a, live.
	if _, err := c.Acquire(ctx, job, "a", 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, job, "a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, job, "b", 20*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Chaos().Expire(ctx, job); err != nil {
		t.Fatal(err)
	}
	if a, err := c.Acquire(ctx, job, "a", 30*time.Second, 0); err != nil || a.Lease.Token != 3 {
		t.Fatalf("acquire: %+v %v", a, err)
	}

	first, err := c.History(ctx, job, leasehold.HistoryOptions{PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := tokensOf(first.Tenures); !slices.Equal(got, []uint64{3, 2}) || first.NextPageToken == "" {
		t.Fatalf("first page: %v, next %q", got, first.NextPageToken)
	}
	live, expired := first.Tenures[0], first.Tenures[1]
	if live.Holder != "a" || live.Ended() || !live.EndedAt.IsZero() || live.TTL != 30*time.Second || live.GrantedAt.Before(before) {
		t.Fatalf("token 3: %+v", live)
	}
	if expired.Holder != "b" || expired.End != pb.Tenure_END_CHAOS || expired.EndedAt.Before(expired.GrantedAt) || expired.TTL != 20*time.Second {
		t.Fatalf("token 2: %+v", expired)
	}
	if len(first.Chaos) != 1 || first.Chaos[0].Action != "expire" || first.Chaos[0].Detail == "" || first.Chaos[0].At.Before(before) {
		t.Fatalf("chaos: %+v", first.Chaos)
	}
	second, err := c.History(ctx, job, leasehold.HistoryOptions{PageSize: 2, PageToken: first.NextPageToken})
	if err != nil {
		t.Fatal(err)
	}
	if got := tokensOf(second.Tenures); !slices.Equal(got, []uint64{1}) || second.NextPageToken != "" || len(second.Chaos) != 0 {
		t.Fatalf("second page: %+v", second)
	}
	if r := second.Tenures[0]; r.Holder != "a" || r.End != pb.Tenure_END_RELEASED || r.EndedAt.IsZero() {
		t.Fatalf("token 1: %+v", r)
	}

	// Every page, one tenure a page.
	var all []leasehold.Tenure
	for tenure, err := range c.HistoryAll(ctx, job, 1) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, tenure)
	}
	if got := tokensOf(all); !slices.Equal(got, []uint64{3, 2, 1}) {
		t.Fatalf("every page: %v", got)
	}
	// Leaving the loop early asks for no more pages.
	for tenure := range c.HistoryAll(ctx, job, 1) {
		if tenure.Token != 3 {
			t.Fatalf("first: %+v", tenure)
		}
		break
	}
}

func TestHistoryOfAnUnknownJobIsEmptyAndBadInputIsTyped(t *testing.T) {
	s := startServer(t)
	c, ctx := dial(t, s), ctxT(t)
	page, err := c.History(ctx, uniqueJob("never"), leasehold.HistoryOptions{})
	if err != nil || len(page.Tenures) != 0 || page.NextPageToken != "" {
		t.Fatalf("an unknown job: %+v %v", page, err)
	}
	var ia *leasehold.InvalidArgumentError
	if _, err := c.History(ctx, "", leasehold.HistoryOptions{}); !errors.As(err, &ia) || ia.Field != "job" {
		t.Fatalf("an empty job: %v", err)
	}
	if _, err := c.History(ctx, "j", leasehold.HistoryOptions{PageToken: "not-a-token"}); !errors.As(err, &ia) || ia.Field != "page_token" {
		t.Fatalf("a bad page token: %v", err)
	}
	n := 0
	for _, err := range c.HistoryAll(ctx, "", 0) {
		n++
		if !errors.As(err, &ia) {
			t.Fatalf("HistoryAll of an empty job: %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("HistoryAll yielded the error %d times", n)
	}
}

func tokensOf(tenures []leasehold.Tenure) []uint64 {
	var out []uint64
	for _, t := range tenures {
		out = append(out, t.Token)
	}
	return out
}
