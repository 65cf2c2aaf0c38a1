package leasehold_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// proofVectors is clients/conformance/proof-vectors.json, which every
// client's verify helper must agree with (docs/proofs.md).
type proofVectors struct {
	Keys  json.RawMessage `json:"keys"`
	Cases []struct {
		Name   string  `json:"name"`
		Proof  string  `json:"proof"`
		Job    *string `json:"job"`
		Token  *string `json:"token"`
		OK     bool    `json:"ok"`
		Error  string  `json:"error"`
		Claims *struct {
			Job       string `json:"job"`
			Token     string `json:"token"`
			Principal string `json:"principal"`
			Holder    string `json:"holder"`
			Iat       int64  `json:"iat"`
			TTLMs     int64  `json:"ttl_ms"`
			Kid       string `json:"kid"`
		} `json:"claims"`
	} `json:"cases"`
}

func readProofVectors(t *testing.T) proofVectors {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "conformance", "proof-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v proofVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	return v
}

// Every case of the conformance vectors gets its verdict, with the key set
// parsed from the JSON text and decoded as an object alike.
func TestProofVectors(t *testing.T) {
	v := readProofVectors(t)
	fromText, err := leasehold.ParseKeySet(string(v.Keys))
	if err != nil {
		t.Fatal(err)
	}
	var decoded leasehold.KeySet
	if err := json.Unmarshal(v.Keys, &decoded); err != nil {
		t.Fatal(err)
	}
	for _, tc := range v.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			var check leasehold.ProofCheck
			if tc.Job != nil {
				check.Job = *tc.Job
			}
			if tc.Token != nil {
				tok, err := strconv.ParseUint(*tc.Token, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				check.Token = tok
			}
			for _, keys := range []leasehold.KeySet{fromText, decoded} {
				c, err := leasehold.VerifyProof(tc.Proof, keys, check)
				if !tc.OK {
					var pe *leasehold.ProofError
					if !errors.As(err, &pe) || pe.Kind.String() != tc.Error || !errors.Is(err, leasehold.ErrInvalidProof) {
						t.Fatalf("want %q, got %v (%+v)", tc.Error, err, c)
					}
					if !strings.Contains(err.Error(), tc.Error) || pe.Message == "" {
						t.Fatalf("message %q", err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				w := tc.Claims
				want := leasehold.ProofClaims{Job: w.Job, Principal: w.Principal, Holder: w.Holder,
					IssuedAt: time.Unix(w.Iat, 0), TTL: time.Duration(w.TTLMs) * time.Millisecond, Kid: w.Kid}
				if want.Token, err = strconv.ParseUint(w.Token, 10, 64); err != nil {
					t.Fatal(err)
				}
				if c != want {
					t.Fatalf("claims %+v, want %+v", c, want)
				}
			}
		})
	}
}

// What the vectors do not hold: characters Go's base64 decoder would skip
// or accept, a key set that lists the kid under another kind of key, and
// the key set made from GetSigningKeysResponse's list.
func TestProofRefusesWhatTheVectorsDoNotHold(t *testing.T) {
	v := readProofVectors(t)
	keys, err := leasehold.ParseKeySet(string(v.Keys))
	if err != nil {
		t.Fatal(err)
	}
	good := v.Cases[0].Proof
	if _, err := leasehold.VerifyProof(good, keys, leasehold.ProofCheck{}); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, ".")
	kind := func(proof string, keys leasehold.KeySet) string {
		_, err := leasehold.VerifyProof(proof, keys, leasehold.ProofCheck{})
		var pe *leasehold.ProofError
		if !errors.As(err, &pe) {
			return "ok"
		}
		return pe.Kind.String()
	}
	std := base64.URLEncoding.EncodeToString // with padding, '+' and '/' as '-' and '_'
	for name, proof := range map[string]string{
		"a newline in the claims":  parts[0] + "." + parts[1][:10] + "\n" + parts[1][10:] + "." + parts[2],
		"a carriage return":        parts[0] + "\r." + parts[1] + "." + parts[2],
		"standard base64 '+'":      parts[0] + "." + parts[1] + "." + strings.ReplaceAll(parts[2], "-", "+"),
		"padding on the signature": parts[0] + "." + parts[1] + "." + parts[2] + "==",
		"four parts":               good + "." + parts[2],
		"a header that is an array": base64.RawURLEncoding.EncodeToString([]byte(`["EdDSA"]`)) + "." +
			parts[1] + "." + parts[2],
		"a header of JSON null": base64.RawURLEncoding.EncodeToString([]byte(`null`)) + "." + parts[1] + "." + parts[2],
		"a header padded":       std([]byte(`{"alg":"EdDSA","kid":"k"}`)) + "." + parts[1] + "." + parts[2],
	} {
		if got := kind(proof, keys); got != "malformed" {
			t.Errorf("%s: %s", name, got)
		}
	}
	kid := keys.Keys[0].Kid
	notEd := leasehold.KeySet{Keys: []leasehold.JWK{{Kty: "OKP", Crv: "X25519", Kid: kid, X: keys.Keys[0].X},
		{Kty: "EC", Crv: "P-256", Kid: kid, X: keys.Keys[0].X}, {Kty: "OKP", Crv: "Ed25519", Kid: kid, X: "AAAA"}}}
	if got := kind(good, notEd); got != "unknown key" {
		t.Errorf("no Ed25519 key under the kid: %s", got)
	}
	if got := kind(good, leasehold.KeySet{}); got != "unknown key" {
		t.Errorf("an empty set: %s", got)
	}

	// GetSigningKeysResponse: its jwks, or its list when that is empty.
	x, _ := base64.RawURLEncoding.DecodeString(keys.Keys[0].X)
	fromList, err := leasehold.KeySetFrom(&pb.GetSigningKeysResponse{Keys: []*pb.SigningKey{{Kid: kid, PublicKey: x, Signing: true}}})
	if err != nil || kind(good, fromList) != "ok" {
		t.Fatalf("from the list: %+v %v", fromList, err)
	}
	fromJwks, err := leasehold.KeySetFrom(&pb.GetSigningKeysResponse{Jwks: fromList.JSON()})
	if err != nil || kind(good, fromJwks) != "ok" || len(fromJwks.Keys) != 1 {
		t.Fatalf("from the jwks: %+v %v", fromJwks, err)
	}
	if ks, err := leasehold.KeySetFrom(&pb.GetSigningKeysResponse{Jwks: `{"keys":[]}`}); err != nil || len(ks.Keys) != 0 {
		t.Fatalf("an empty set: %+v %v", ks, err)
	}
	for _, bad := range []string{"", "[]", `{"keys":{}}`, `{"other":[]}`, "null"} {
		if _, err := leasehold.ParseKeySet(bad); err == nil {
			t.Errorf("ParseKeySet(%q) accepted", bad)
		}
	}
}

// altered is proof with one character of its claims changed to another
// base64url one: well formed, but its signature no longer verifies.
func altered(proof string) string {
	parts := strings.Split(proof, ".")
	c := []byte(parts[1])
	i := len(c) / 2
	if c[i] == 'A' {
		c[i] = 'B'
	} else {
		c[i] = 'A'
	}
	parts[1] = string(c)
	return strings.Join(parts, ".")
}

// A grant carries a proof that verifies under the server's keys with its
// job and token; renewals keep it; the next grant has its own.
func TestAGrantCarriesAProofThatVerifies(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("proof")
	keys, err := c.SigningKeys(ctx)
	if err != nil || len(keys.Keys) == 0 {
		t.Fatalf("signing keys: %+v %v", keys, err)
	}
	// The same set as GET /keys on the admin port.
	resp, err := http.Get("http://" + s.admin + "/keys")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if admin, err := leasehold.ParseKeySet(string(body)); err != nil || !reflect.DeepEqual(admin, keys) {
		t.Fatalf("GET /keys: %s %v, the rpc: %+v", body, err, keys)
	}

	before := time.Now().Add(-2 * time.Second)
	a, err := c.Acquire(ctx, job, "a", 30*time.Second, 0)
	if err != nil || !a.Acquired || a.Lease.Proof == "" {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	proof := a.Lease.Proof
	claims, err := leasehold.VerifyProof(proof, keys, leasehold.ProofCheck{Job: job, Token: a.Lease.Token})
	if err != nil {
		t.Fatal(err)
	}
	want := leasehold.ProofClaims{Job: job, Token: 1, Holder: "a", Principal: "", IssuedAt: claims.IssuedAt,
		TTL: 30 * time.Second, Kid: keys.Keys[0].Kid}
	if claims != want || claims.IssuedAt.Before(before.Truncate(time.Second)) || claims.IssuedAt.After(time.Now()) {
		t.Fatalf("claims %+v, want %+v", claims, want)
	}

	l, err := c.Renew(ctx, job, "a", 1, 20*time.Second)
	if err != nil || l.Proof != proof {
		t.Fatalf("renewal's proof %q (%v), the grant's %q", l.Proof, err, proof)
	}
	if l, err = c.GetLease(ctx, job); err != nil || l.Proof != proof {
		t.Fatalf("GetLease's proof %q (%v), the grant's %q", l.Proof, err, proof)
	}

	if err := c.Release(ctx, job, "a", 1); err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, job, "b", 30*time.Second, 0)
	if err != nil || !b.Acquired || b.Lease.Token != 2 || b.Lease.Proof == "" || b.Lease.Proof == proof {
		t.Fatalf("next grant: %+v %v (the first's proof %q)", b, err, proof)
	}
	next, err := leasehold.VerifyProof(b.Lease.Proof, keys, leasehold.ProofCheck{Job: job, Token: 2})
	if err != nil || next.Token != 2 || next.Holder != "b" || next.Job != job {
		t.Fatalf("next grant's claims: %+v %v", next, err)
	}

	refusal := func(proof string, check leasehold.ProofCheck) leasehold.ProofErrorKind {
		_, err := leasehold.VerifyProof(proof, keys, check)
		var pe *leasehold.ProofError
		if !errors.As(err, &pe) {
			t.Fatalf("%+v accepted", check)
		}
		return pe.Kind
	}
	if k := refusal(proof, leasehold.ProofCheck{Job: job + "-other", Token: 1}); k != leasehold.ProofWrongJob {
		t.Fatalf("another job: %v", k)
	}
	if k := refusal(proof, leasehold.ProofCheck{Job: job, Token: 2}); k != leasehold.ProofWrongToken {
		t.Fatalf("another token: %v", k)
	}
	if k := refusal(altered(proof), leasehold.ProofCheck{}); k != leasehold.ProofBadSignature {
		t.Fatalf("altered: %v", k)
	}
}

// A write fenced by a proof instead of a token: made while the grant is
// live, fenced once the lease passed to another holder, refused as an
// invalid argument when the proof does not verify.
func TestCheckedWriteWithAProof(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("proof-write")
	a, err := c.Acquire(ctx, job, "a", 30*time.Second, 0)
	if err != nil || a.Lease.Proof == "" {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	proof := a.Lease.Proof
	v, err := c.CheckedWrite(ctx, job, 0, []byte("k"), []byte("by proof"), leasehold.WithProof(proof))
	if err != nil || v != 1 {
		t.Fatalf("write with the proof: %d %v", v, err)
	}
	if got, _ := c.Read(ctx, job, []byte("k")); string(got.Value) != "by proof" || got.Token != 1 {
		t.Fatalf("read: %+v", got)
	}
	if v, err = c.CheckedWrite(ctx, job, 1, []byte("k"), []byte("both"), leasehold.WithProof(proof)); err != nil || v != 2 {
		t.Fatalf("write with the proof and its token: %d %v", v, err)
	}
	if v, err = c.Delete(ctx, job, 0, []byte("k"), leasehold.WithProof(proof)); err != nil || v != 3 {
		t.Fatalf("delete with the proof: %d %v", v, err)
	}

	_, err = c.CheckedWrite(ctx, job, 0, []byte("k"), []byte("forged"), leasehold.WithProof(altered(proof)))
	var ia *leasehold.InvalidArgumentError
	if !errors.As(err, &ia) || !errors.Is(err, leasehold.ErrInvalidArgument) || ia.Field != "proof" {
		t.Fatalf("an altered proof: %#v", err)
	}

	// The lease passes to b: a's proof is still valid, and fenced.
	if err := c.Release(ctx, job, "a", 1); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Acquire(ctx, job, "b", 30*time.Second, 0); err != nil || b.Lease.Token != 2 {
		t.Fatalf("b: %+v %v", b, err)
	}
	_, err = c.CheckedWrite(ctx, job, 0, []byte("k"), []byte("stale"), leasehold.WithProof(proof))
	var f *leasehold.FencedError
	if !errors.As(err, &f) || f.CurrentToken != 2 || !errors.Is(err, leasehold.ErrFenced) {
		t.Fatalf("a's proof after b took over: %#v", err)
	}
	if got, _ := c.Read(ctx, job, []byte("k")); got.Found {
		t.Fatalf("a fenced write landed: %+v", got)
	}
}

// The elector gives the proof of the grant it leads with, next to its
// token, and none once it has stopped.
func TestElectorGivesItsGrantsProof(t *testing.T) {
	s := startServer(t)
	c, ctx, job := dial(t, s), ctxT(t), uniqueJob("proof-elector")
	keys, err := c.SigningKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, c, job, "a", 3*time.Second)
	waitUntil(t, patience, "a leads", e.IsLeader)
	token, _ := e.Token()
	proof, leading := e.Proof()
	claims, err := leasehold.VerifyProof(proof, keys, leasehold.ProofCheck{Job: job, Token: token})
	if !leading || err != nil || claims.Holder != e.Holder() {
		t.Fatalf("proof %q (leading %v): %+v %v", proof, leading, claims, err)
	}
	s.waitRenewals(t, 2)
	if again, _ := e.Proof(); again != proof {
		t.Fatalf("after renewals %q, the grant's %q", again, proof)
	}
	e.stop()
	if p, leading := e.Proof(); p != "" || leading {
		t.Fatalf("stopped: %q %v", p, leading)
	}
}
