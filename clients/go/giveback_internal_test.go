package leasehold

import "testing"

// The registry a give-back consults: a give-back of call n goes ahead only
// for a pair with no newer call, none on its way, and a token above every
// token told; a pair leaves once it has no call on its way and nothing
// told.
func TestGiveBackSkipsWhatACallWasToldAndTheRegistryEmpties(t *testing.T) {
	c := newCalls()
	key := pairKey{"j", "a"}

	// A call answered without a grant leaves nothing behind.
	first := c.start("j", "a")
	first.end()
	first.end() // only the first end counts
	if c.size() != 0 {
		t.Fatalf("%d pairs after a call told nothing", c.size())
	}
	if !c.mayGiveBack(key, first.n, 1) {
		t.Fatal("a pair with no entry may be given back")
	}

	// A cancelled call, then a retry: while the retry is on its way, and
	// after it was told token 7, the cancelled call gives nothing back.
	cancelled := c.start("j", "a")
	cancelled.end()
	if !c.mayGiveBack(key, cancelled.n, 7) {
		t.Fatal("nothing started since the cancelled call: it may give back")
	}
	retry := c.start("j", "a")
	if c.mayGiveBack(key, cancelled.n, 7) || c.mayGiveBack(key, retry.n, 7) {
		t.Fatal("a give-back while a call of the pair is on its way")
	}
	retry.told(7)
	retry.end()
	if c.mayGiveBack(key, cancelled.n, 7) || c.mayGiveBack(key, cancelled.n, 8) {
		t.Fatal("a give-back of a call older than the newest")
	}

	// The newest call itself cancelled later: a token told is kept, a
	// newer one is given back.
	again := c.start("j", "a")
	again.end()
	if c.mayGiveBack(key, again.n, 7) {
		t.Fatal("a give-back of a token a call was told")
	}
	if !c.mayGiveBack(key, again.n, 8) {
		t.Fatal("a token above every token told may be given back")
	}
	if c.size() != 1 {
		t.Fatalf("%d pairs while a token told is live", c.size())
	}

	// A release forgets what was told, and the pair leaves.
	c.released("j", "a")
	if c.size() != 0 {
		t.Fatalf("%d pairs after the release", c.size())
	}

	// A release while a call is on its way keeps the pair until it ends.
	renew := c.start("j", "a")
	c.released("j", "a")
	if c.size() != 1 {
		t.Fatal("the pair of a call on its way stays")
	}
	renew.end()
	if c.size() != 0 {
		t.Fatalf("%d pairs after the last call ended", c.size())
	}

	// Numbers come from one counter for every pair.
	x, y := c.start("j", "a"), c.start("k", "b")
	if y.n <= x.n {
		t.Fatalf("call numbers %d then %d", x.n, y.n)
	}
	x.end()
	y.end()
}
