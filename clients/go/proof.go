package leasehold

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// A grant's proof (Lease.Proof) is a JWS in compact serialization, signed
// by the server with EdDSA over Ed25519, stating that it issued a token of
// a job to a holder. Storage that leasehold does not own verifies it with
// the server's public keys (Client.SigningKeys, or GET /keys on the admin
// port) before comparing tokens, so a token nobody issued is refused.
//
// It proves that the token was issued, not that the lease is still live:
// a paused leader keeps a valid proof after its lease has passed to a
// successor. The fence is still "token at least the stored one". The
// format and the verify algorithm: docs/proofs.md.

const (
	proofAlg = "EdDSA"
	proofTyp = "leasehold-proof+jwt"
	proofIss = "leasehold"
)

// ErrInvalidProof: VerifyProof refused a proof; a *ProofError says why.
var ErrInvalidProof = errors.New("leasehold: invalid proof")

// ProofErrorKind is the class of a proof's refusal, in the order
// VerifyProof checks them.
type ProofErrorKind int

const (
	// ProofMalformed: not three base64url parts without padding, a header
	// that is not a JSON object, or (once the signature verified) claims
	// that are not a JSON object of the claims' types, an iss other than
	// "leasehold", or a token that is not a decimal u64 above 0.
	ProofMalformed ProofErrorKind = iota + 1
	// ProofUnsupported: an alg other than EdDSA or a typ other than
	// leasehold-proof+jwt.
	ProofUnsupported
	// ProofUnknownKey: the kid names no Ed25519 key of the set (a key
	// rotated out of it, or another server's).
	ProofUnknownKey
	// ProofBadSignature: the signature does not verify with the kid's key
	// (an altered proof, or a forged one).
	ProofBadSignature
	// ProofWrongJob: a valid proof, of another job than ProofCheck.Job.
	ProofWrongJob
	// ProofWrongToken: a valid proof, of another token than
	// ProofCheck.Token.
	ProofWrongToken
)

// String is the kind as docs/proofs.md and the conformance vectors name
// it: "malformed", "unsupported", "unknown key", "bad signature", "wrong
// job", "wrong token".
func (k ProofErrorKind) String() string {
	switch k {
	case ProofMalformed:
		return "malformed"
	case ProofUnsupported:
		return "unsupported"
	case ProofUnknownKey:
		return "unknown key"
	case ProofBadSignature:
		return "bad signature"
	case ProofWrongJob:
		return "wrong job"
	case ProofWrongToken:
		return "wrong token"
	}
	return "unspecified"
}

// ProofError: VerifyProof refused a proof. Matches ErrInvalidProof.
type ProofError struct {
	Kind    ProofErrorKind
	Message string
}

func (e *ProofError) Error() string {
	return fmt.Sprintf("leasehold: proof refused: %s (%s)", e.Message, e.Kind)
}
func (e *ProofError) Is(target error) bool { return target == ErrInvalidProof }

func proofErr(kind ProofErrorKind, format string, args ...any) error {
	return &ProofError{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// JWK is one public key of a KeySet, as RFC 7517 (and RFC 8037 for
// Ed25519) writes it. VerifyProof uses the keys with Kty "OKP" and Crv
// "Ed25519" (and Alg "EdDSA" or none), and ignores the others.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv,omitempty"`
	Alg string `json:"alg,omitempty"`
	Use string `json:"use,omitempty"`
	// Kid is the key id, the proofs' kid header: the key's RFC 7638
	// thumbprint.
	Kid string `json:"kid,omitempty"`
	// X is the 32-byte Ed25519 public key, base64url without padding.
	X string `json:"x,omitempty"`
}

// KeySet is the server's public keys, a JWKS (RFC 7517):
// {"keys":[{"kty":"OKP","crv":"Ed25519","alg":"EdDSA","use":"sig","kid":...,"x":...}]}.
// The first key signs new grants; every key listed verifies. Get it with
// Client.SigningKeys, parse it from JSON (GET /keys on the admin port)
// with ParseKeySet or json.Unmarshal, or from a GetSigningKeysResponse
// with KeySetFrom.
type KeySet struct {
	Keys []JWK `json:"keys"`
}

// ParseKeySet parses a JWKS, as GetSigningKeysResponse.jwks and GET /keys
// give it. It fails on JSON that is not an object with a "keys" array.
func ParseKeySet(jwks string) (KeySet, error) {
	var raw struct {
		Keys *[]JWK `json:"keys"`
	}
	if err := json.Unmarshal([]byte(jwks), &raw); err != nil {
		return KeySet{}, fmt.Errorf("leasehold: not a JWKS: %w", err)
	}
	if raw.Keys == nil {
		return KeySet{}, errors.New(`leasehold: not a JWKS: no "keys" array`)
	}
	return KeySet{Keys: *raw.Keys}, nil
}

// KeySetFrom is the key set of a GetSigningKeysResponse: its jwks, or,
// when that is empty, its keys.
func KeySetFrom(r *pb.GetSigningKeysResponse) (KeySet, error) {
	if r.GetJwks() != "" {
		return ParseKeySet(r.GetJwks())
	}
	ks := KeySet{Keys: []JWK{}}
	for _, k := range r.GetKeys() {
		ks.Keys = append(ks.Keys, JWK{Kty: "OKP", Crv: "Ed25519", Alg: proofAlg, Use: "sig", Kid: k.GetKid(),
			X: base64.RawURLEncoding.EncodeToString(k.GetPublicKey())})
	}
	return ks, nil
}

// JSON is the key set as a JWKS document.
func (ks KeySet) JSON() string {
	if ks.Keys == nil {
		ks.Keys = []JWK{}
	}
	b, _ := json.Marshal(ks)
	return string(b)
}

// ed25519Key is the public key of the set's Ed25519 key kid, if it lists
// one.
func (ks KeySet) ed25519Key(kid string) (ed25519.PublicKey, bool) {
	for _, k := range ks.Keys {
		if k.Kid != kid || k.Kty != "OKP" || k.Crv != "Ed25519" || (k.Alg != "" && k.Alg != proofAlg) {
			continue
		}
		x, ok := b64url(k.X)
		if ok && len(x) == ed25519.PublicKeySize {
			return ed25519.PublicKey(x), true
		}
	}
	return nil, false
}

// ProofCheck is what VerifyProof compares a valid proof's claims with.
// Zero values check nothing.
type ProofCheck struct {
	// Job the proof must be of; "" for any.
	Job string
	// Token the proof must state, the one the caller was given; 0 for any.
	Token uint64
}

// ProofClaims is what a valid proof states: the server issued Token of
// Job to Holder (of Principal) at IssuedAt, for TTL.
type ProofClaims struct {
	Job   string
	Token uint64
	// Principal is the principal of the server's policy the grant is bound
	// to; "" on a server without a policy.
	Principal string
	// Holder is the holder, as its client named it.
	Holder string
	// IssuedAt is when the token was granted, by the server's wall clock,
	// to the second (the iat claim).
	IssuedAt time.Time
	// TTL is the TTL the token was granted with (the ttl_ms claim).
	TTL time.Duration
	// Kid is the id of the key that signed it.
	Kid string
}

// VerifyProof verifies a grant's proof with keys and returns its claims.
// It refuses, with a *ProofError (ErrInvalidProof) whose Kind says why, in
// this order (docs/proofs.md): not three base64url parts without padding,
// or a header that is not a JSON object (ProofMalformed); an alg other
// than EdDSA or a typ other than leasehold-proof+jwt (ProofUnsupported); a
// kid that names no Ed25519 key of keys (ProofUnknownKey); a signature
// that does not verify over header "." claims with that key
// (ProofBadSignature); claims that are not a JSON object of the claims'
// types, an iss other than "leasehold", or a token that is not a decimal
// u64 above 0 (ProofMalformed); another job than check.Job
// (ProofWrongJob) or another token than check.Token (ProofWrongToken),
// when they are set.
//
// A valid proof says that the token was issued, not that the lease is
// still live: compare the token with the one stored, as without a proof.
func VerifyProof(proof string, keys KeySet, check ProofCheck) (ProofClaims, error) {
	parts := strings.Split(proof, ".")
	if len(parts) != 3 {
		return ProofClaims{}, proofErr(ProofMalformed, "%d part(s), not 3 joined by dots", len(parts))
	}
	names := [3]string{"header", "claims", "signature"}
	var raw [3][]byte
	for i, p := range parts {
		b, ok := b64url(p)
		if !ok {
			return ProofClaims{}, proofErr(ProofMalformed, "the %s is not base64url without padding", names[i])
		}
		raw[i] = b
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[0], &header); err != nil || header == nil {
		return ProofClaims{}, proofErr(ProofMalformed, "the header is not a JSON object")
	}
	if alg, _ := jsonString(header["alg"]); alg != proofAlg {
		return ProofClaims{}, proofErr(ProofUnsupported, "alg %s, not %q", shown(header["alg"]), proofAlg)
	}
	if typ, _ := jsonString(header["typ"]); typ != proofTyp {
		return ProofClaims{}, proofErr(ProofUnsupported, "typ %s, not %q", shown(header["typ"]), proofTyp)
	}
	kid, _ := jsonString(header["kid"])
	key, ok := keys.ed25519Key(kid)
	if !ok {
		return ProofClaims{}, proofErr(ProofUnknownKey, "kid %s names no Ed25519 key of the set", shown(header["kid"]))
	}
	if !ed25519.Verify(key, []byte(parts[0]+"."+parts[1]), raw[2]) {
		return ProofClaims{}, proofErr(ProofBadSignature, "the signature does not verify with key %q", kid)
	}
	c, err := parseClaims(raw[1])
	if err != nil {
		return ProofClaims{}, err
	}
	c.Kid = kid
	if check.Job != "" && c.Job != check.Job {
		return ProofClaims{}, proofErr(ProofWrongJob, "a proof of job %q, not %q", c.Job, check.Job)
	}
	if check.Token != 0 && c.Token != check.Token {
		return ProofClaims{}, proofErr(ProofWrongToken, "a proof of token %d, not %d", c.Token, check.Token)
	}
	return c, nil
}

// parseClaims reads the claims of a proof whose signature verified.
func parseClaims(b []byte) (ProofClaims, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return ProofClaims{}, proofErr(ProofMalformed, "the claims are not a JSON object")
	}
	str := func(name string) (string, error) {
		s, ok := jsonString(m[name])
		if !ok {
			return "", proofErr(ProofMalformed, "claim %q is not a string", name)
		}
		return s, nil
	}
	integer := func(name string) (string, error) {
		v := m[name]
		if len(v) == 0 || !isInteger(string(v)) {
			return "", proofErr(ProofMalformed, "claim %q is not an integer", name)
		}
		return string(v), nil
	}
	var c ProofClaims
	iss, err := str("iss")
	if err != nil {
		return c, err
	}
	if iss != proofIss {
		return c, proofErr(ProofMalformed, "iss %q, not %q", iss, proofIss)
	}
	if c.Job, err = str("job"); err != nil {
		return c, err
	}
	token, err := str("token")
	if err != nil {
		return c, err
	}
	if c.Token, err = parseToken(token); err != nil {
		return c, err
	}
	if c.Principal, err = str("principal"); err != nil {
		return c, err
	}
	if c.Holder, err = str("holder"); err != nil {
		return c, err
	}
	iat, err := integer("iat")
	if err != nil {
		return c, err
	}
	secs, perr := strconv.ParseInt(iat, 10, 64)
	if perr != nil {
		return c, proofErr(ProofMalformed, "claim \"iat\" %s is out of range", iat)
	}
	c.IssuedAt = time.Unix(secs, 0)
	ttl, err := integer("ttl_ms")
	if err != nil {
		return c, err
	}
	ms, perr := strconv.ParseUint(ttl, 10, 64)
	if perr != nil || ms > uint64(time.Duration(1<<63-1)/time.Millisecond) {
		return c, proofErr(ProofMalformed, "claim \"ttl_ms\" %s is out of range", ttl)
	}
	c.TTL = time.Duration(ms) * time.Millisecond
	return c, nil
}

// parseToken reads the token claim: decimal digits only, no leading zero,
// a u64 above 0.
func parseToken(s string) (uint64, error) {
	digits := s != "" && s[0] != '0'
	for i := 0; i < len(s); i++ {
		digits = digits && s[i] >= '0' && s[i] <= '9'
	}
	t, err := strconv.ParseUint(s, 10, 64)
	if !digits || err != nil || t == 0 {
		return 0, proofErr(ProofMalformed, "token %q is not a decimal u64 above 0 without leading zeros", s)
	}
	return t, nil
}

// isInteger reports whether a JSON value is an integer: an optional minus
// and digits, no fraction, no exponent.
func isInteger(v string) bool {
	v = strings.TrimPrefix(v, "-")
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// jsonString is a JSON value that is a string, decoded.
func jsonString(v json.RawMessage) (string, bool) {
	if len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// shown is a header's value for a message: its JSON, or "none".
func shown(v json.RawMessage) string {
	if len(v) == 0 {
		return "none"
	}
	return string(v)
}

// b64url decodes base64url without padding, refusing any other character
// (padding '=', '+', '/', whitespace, which Go's decoder would skip).
func b64url(s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, false
		}
	}
	// Strict: a last character with unused bits set is refused, so that
	// one proof has one spelling.
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	return b, err == nil
}
