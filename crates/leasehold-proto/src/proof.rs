//! Grants' proofs (`Lease.proof`): the format, signing, and verification.
//!
//! A proof is a JWS in compact serialization (RFC 7515) signed with EdDSA
//! over Ed25519 (RFC 8037), stating job, token, principal, holder, when
//! the token was granted and the TTL it was granted with. The public keys
//! travel as a JWKS (RFC 7517), each named by its RFC 7638 thumbprint.
//! `docs/proofs.md` is the specification; this module is its reference
//! implementation, and `clients/conformance/proof-vectors.json` the
//! verdicts every client's verifier must reach (tested below, byte for
//! byte for the signer).
//!
//! **A proof proves that a token was issued, not that it is still live.**
//! Storage that leasehold does not own still fences by comparing tokens;
//! the proof only guarantees that every token it compares was really
//! issued, so that a client cannot lock real leaders out with a token of
//! its own invention.
//!
//! Here because the format is part of the contract: the server signs with
//! it, and the Rust client verifies with it.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{self, Ed25519KeyPair, KeyPair};

/// The proofs' `typ` header.
pub const TYP: &str = "leasehold-proof+jwt";
/// The proofs' `iss` claim.
pub const ISSUER: &str = "leasehold";

/// What a proof states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The job.
    pub job: String,
    /// The fencing token.
    pub token: u64,
    /// The principal the grant is bound to; empty without a policy.
    pub principal: String,
    /// The holder, as its client named it.
    pub holder: String,
    /// When the token was granted, in seconds since the Unix epoch.
    pub issued_at: u64,
    /// The TTL it was granted with, in milliseconds.
    pub ttl_ms: u64,
    /// The id of the key that signed it.
    pub kid: String,
}

/// Why a proof was refused. The kinds are the classes of docs/proofs.md,
/// in the order they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProofErrorKind {
    /// Not a JWS of three base64url parts, or its header or claims are
    /// not what the format says.
    Malformed,
    /// An algorithm or type other than EdDSA and `leasehold-proof+jwt`.
    Unsupported,
    /// Its key id names no Ed25519 key of the set.
    UnknownKey,
    /// The signature does not verify with the key its id names.
    BadSignature,
    /// A proof for another job than the one expected.
    WrongJob,
    /// A proof for another token than the one given.
    WrongToken,
}

impl ProofErrorKind {
    /// The class's name, as docs/proofs.md and the vectors spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProofErrorKind::Malformed => "malformed",
            ProofErrorKind::Unsupported => "unsupported",
            ProofErrorKind::UnknownKey => "unknown key",
            ProofErrorKind::BadSignature => "bad signature",
            ProofErrorKind::WrongJob => "wrong job",
            ProofErrorKind::WrongToken => "wrong token",
        }
    }
}

/// A refused proof: its class, and what exactly was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofError {
    /// The class.
    pub kind: ProofErrorKind,
    /// What was wrong, for people.
    pub message: String,
}

impl fmt::Display for ProofError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "proof refused ({}): {}",
            self.kind.as_str(),
            self.message
        )
    }
}

impl std::error::Error for ProofError {}

fn refuse<T>(kind: ProofErrorKind, message: impl Into<String>) -> Result<T, ProofError> {
    Err(ProofError {
        kind,
        message: message.into(),
    })
}

/// One public key of a key set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// Its RFC 7638 thumbprint.
    pub kid: String,
    /// The 32-byte Ed25519 public key.
    pub x: [u8; 32],
}

impl PublicKey {
    /// The key `x`, named by its thumbprint.
    pub fn new(x: [u8; 32]) -> PublicKey {
        PublicKey { kid: kid_of(&x), x }
    }
}

/// The RFC 7638 thumbprint of an Ed25519 public key: base64url of the
/// SHA-256 of `{"crv":"Ed25519","kty":"OKP","x":"<x>"}`.
pub fn kid_of(x: &[u8; 32]) -> String {
    let canonical = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(x)
    );
    URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        canonical.as_bytes(),
    ))
}

/// The public keys that verify proofs; the first one signs new grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    /// The keys, the signing one first.
    pub keys: Vec<PublicKey>,
}

impl KeySet {
    /// The key named `kid`.
    pub fn get(&self, kid: &str) -> Option<&PublicKey> {
        self.keys.iter().find(|k| k.kid == kid)
    }

    /// The set as a JWKS (RFC 7517), as `GET /keys` serves it.
    pub fn to_jwks(&self) -> String {
        let keys: Vec<String> = self
            .keys
            .iter()
            .map(|k| {
                format!(
                    r#"{{"kty":"OKP","crv":"Ed25519","alg":"EdDSA","use":"sig","kid":"{}","x":"{}"}}"#,
                    k.kid,
                    URL_SAFE_NO_PAD.encode(k.x)
                )
            })
            .collect();
        format!(r#"{{"keys":[{}]}}"#, keys.join(","))
    }

    /// Reads a JWKS. Keys other than Ed25519 (`kty` OKP, `crv` Ed25519)
    /// are skipped; a key whose `kid` is not its thumbprint keeps the
    /// `kid` it was given (proofs name keys by it).
    pub fn from_jwks(jwks: &str) -> Result<KeySet, ProofError> {
        let v: serde_json::Value = serde_json::from_str(jwks).or_else(|e| {
            refuse(
                ProofErrorKind::Malformed,
                format!("the key set is not JSON: {e}"),
            )
        })?;
        let Some(keys) = v.get("keys").and_then(|k| k.as_array()) else {
            return refuse(
                ProofErrorKind::Malformed,
                "the key set has no \"keys\" array",
            );
        };
        let mut set = KeySet::default();
        for k in keys {
            let s = |f: &str| k.get(f).and_then(|v| v.as_str());
            if s("kty") != Some("OKP") || s("crv") != Some("Ed25519") {
                continue;
            }
            let x = s("x")
                .and_then(|x| b64(x).ok())
                .and_then(|x| <[u8; 32]>::try_from(x).ok());
            let (Some(x), Some(kid)) = (x, s("kid")) else {
                return refuse(
                    ProofErrorKind::Malformed,
                    "a key of the set lacks \"kid\", or its \"x\" is not 32 bytes of base64url",
                );
            };
            set.keys.push(PublicKey {
                kid: kid.to_owned(),
                x,
            });
        }
        Ok(set)
    }

    /// The set a `GetSigningKeys` answer lists.
    pub fn from_response(r: &crate::GetSigningKeysResponse) -> Result<KeySet, ProofError> {
        let mut set = KeySet::default();
        for k in &r.keys {
            let Ok(x) = <[u8; 32]>::try_from(k.public_key.as_slice()) else {
                return refuse(
                    ProofErrorKind::Malformed,
                    format!("key {} is not a 32-byte Ed25519 public key", k.kid),
                );
            };
            set.keys.push(PublicKey {
                kid: k.kid.clone(),
                x,
            });
        }
        Ok(set)
    }
}

/// Strict base64url without padding: `=`, characters outside the
/// alphabet, and a last character with unused bits set are refused.
fn b64(s: &str) -> Result<Vec<u8>, ()> {
    if s.contains('=') {
        return Err(());
    }
    URL_SAFE_NO_PAD.decode(s).map_err(|_| ())
}

/// The claims as the server writes them: compact JSON, in the order of
/// docs/proofs.md.
pub fn encode_claims(c: &Claims) -> String {
    let s = |v: &str| serde_json::to_string(v).expect("a string serialises");
    format!(
        r#"{{"iss":"{ISSUER}","job":{},"token":"{}","principal":{},"holder":{},"iat":{},"ttl_ms":{}}}"#,
        s(&c.job),
        c.token,
        s(&c.principal),
        s(&c.holder),
        c.issued_at,
        c.ttl_ms
    )
}

/// An Ed25519 private key that signs proofs.
pub struct Signer {
    pair: Ed25519KeyPair,
    public: PublicKey,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("kid", &self.public.kid)
            .finish_non_exhaustive()
    }
}

const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

impl Signer {
    /// A key from a PKCS#8 PEM document (`-----BEGIN PRIVATE KEY-----`,
    /// as `openssl genpkey -algorithm ed25519` writes it, or
    /// [`Signer::generate_pem`]).
    pub fn from_pem(pem: &str) -> Result<Signer, String> {
        let body = pem
            .trim()
            .strip_prefix(PEM_BEGIN)
            .and_then(|b| b.strip_suffix(PEM_END))
            .ok_or_else(|| {
                format!("not a PKCS#8 PEM private key (expected {PEM_BEGIN} ... {PEM_END})")
            })?;
        let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("the PEM body is not base64: {e}"))?;
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der)
            .map_err(|e| format!("not an Ed25519 PKCS#8 key: {e}"))?;
        let x: [u8; 32] = pair
            .public_key()
            .as_ref()
            .try_into()
            .map_err(|_| "an Ed25519 public key is 32 bytes".to_owned())?;
        Ok(Signer {
            pair,
            public: PublicKey::new(x),
        })
    }

    /// A new random key, as a PKCS#8 PEM document.
    pub fn generate_pem() -> Result<String, String> {
        let der = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
            .map_err(|e| format!("no randomness for a key: {e}"))?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let mut pem = String::from(PEM_BEGIN);
        pem.push('\n');
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
            pem.push('\n');
        }
        pem.push_str(PEM_END);
        pem.push('\n');
        Ok(pem)
    }

    /// Its public key.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// The proof of `c` (whose `kid` is ignored: this key's is used).
    /// Deterministic: the same claims give the same bytes.
    pub fn sign(&self, c: &Claims) -> String {
        let header = format!(
            r#"{{"alg":"EdDSA","kid":"{}","typ":"{TYP}"}}"#,
            self.public.kid
        );
        let mut out = URL_SAFE_NO_PAD.encode(header);
        out.push('.');
        out.push_str(&URL_SAFE_NO_PAD.encode(encode_claims(c)));
        let sig = self.pair.sign(out.as_bytes());
        out.push('.');
        out.push_str(&URL_SAFE_NO_PAD.encode(sig.as_ref()));
        out
    }
}

/// Verifies `proof` with `keys`, in the order of docs/proofs.md, and
/// returns what it states.
pub fn verify(proof: &str, keys: &KeySet) -> Result<Claims, ProofError> {
    use ProofErrorKind::*;
    let parts: Vec<&str> = proof.split('.').collect();
    let [h64, c64, s64] = parts[..] else {
        return refuse(Malformed, "a proof is three base64url parts joined by dots");
    };
    let part = |p: &str, what: &str| {
        b64(p).or_else(|()| {
            refuse(
                Malformed,
                format!("its {what} is not base64url without padding"),
            )
        })
    };
    let header = part(h64, "header")?;
    let claims = part(c64, "claims")?;
    let sig = part(s64, "signature")?;
    let header: serde_json::Value = serde_json::from_slice(&header)
        .ok()
        .filter(|v: &serde_json::Value| v.is_object())
        .map_or_else(|| refuse(Malformed, "its header is not a JSON object"), Ok)?;
    let hs = |f: &str| header.get(f).and_then(|v| v.as_str());
    if hs("alg") != Some("EdDSA") {
        return refuse(
            Unsupported,
            format!("alg {:?}: only EdDSA is accepted", header.get("alg")),
        );
    }
    if hs("typ") != Some(TYP) {
        return refuse(
            Unsupported,
            format!("typ {:?}: only {TYP} is accepted", header.get("typ")),
        );
    }
    let Some(kid) = hs("kid") else {
        return refuse(UnknownKey, "its header names no key (kid)");
    };
    let Some(key) = keys.get(kid) else {
        return refuse(UnknownKey, format!("key {kid} is not in the key set"));
    };
    let signed = &proof[..h64.len() + 1 + c64.len()];
    signature::UnparsedPublicKey::new(&signature::ED25519, key.x)
        .verify(signed.as_bytes(), &sig)
        .or_else(|_| {
            refuse(
                BadSignature,
                format!("the signature does not verify with key {kid}"),
            )
        })?;
    let c: serde_json::Value = serde_json::from_slice(&claims)
        .ok()
        .filter(|v: &serde_json::Value| v.is_object())
        .map_or_else(|| refuse(Malformed, "its claims are not a JSON object"), Ok)?;
    let text = |f: &str| {
        c.get(f)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .map_or_else(
                || refuse(Malformed, format!("claim {f} is not a string")),
                Ok,
            )
    };
    let number = |f: &str| {
        c.get(f).and_then(|v| v.as_u64()).map_or_else(
            || refuse(Malformed, format!("claim {f} is not a whole number")),
            Ok,
        )
    };
    if text("iss")? != ISSUER {
        return refuse(Malformed, format!("claim iss is not {ISSUER:?}"));
    }
    let token = text("token")?;
    let token = match token.parse::<u64>() {
        Ok(t) if t > 0 && token.bytes().all(|b| b.is_ascii_digit()) && !token.starts_with('0') => t,
        _ => {
            return refuse(
                Malformed,
                format!(
                    "claim token {token:?} is not a decimal token above 0 without leading zeros"
                ),
            )
        }
    };
    Ok(Claims {
        job: text("job")?,
        token,
        principal: text("principal")?,
        holder: text("holder")?,
        issued_at: number("iat")?,
        ttl_ms: number("ttl_ms")?,
        kid: kid.to_owned(),
    })
}

/// [`verify`], and the proof must be for `job` and, when given, `token`.
pub fn verify_for(
    proof: &str,
    keys: &KeySet,
    job: &str,
    token: Option<u64>,
) -> Result<Claims, ProofError> {
    let c = verify(proof, keys)?;
    if c.job != job {
        return refuse(
            ProofErrorKind::WrongJob,
            format!("the proof is for job {:?}, not {job:?}", c.job),
        );
    }
    if let Some(t) = token.filter(|t| *t != c.token) {
        return refuse(
            ProofErrorKind::WrongToken,
            format!("the proof is for token {}, not {t}", c.token),
        );
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors() -> serde_json::Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../clients/conformance/proof-vectors.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn every_vector_gets_its_verdict() {
        let v = vectors();
        let keys = KeySet::from_jwks(&v["keys"].to_string()).unwrap();
        assert_eq!(keys.keys.len(), 2);
        for k in &keys.keys {
            assert_eq!(k.kid, kid_of(&k.x), "a kid is its key's thumbprint");
        }
        let cases = v["cases"].as_array().unwrap();
        assert!(cases.len() >= 20);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let proof = case["proof"].as_str().unwrap();
            let job = case.get("job").and_then(|j| j.as_str());
            let token = case
                .get("token")
                .and_then(|t| t.as_str())
                .map(|t| t.parse().unwrap());
            let got = match job {
                Some(j) => verify_for(proof, &keys, j, token),
                None => verify(proof, &keys).and_then(|c| match token {
                    Some(t) => verify_for(proof, &keys, &c.job, Some(t)),
                    None => Ok(c),
                }),
            };
            if case["ok"].as_bool().unwrap() {
                let c = got.unwrap_or_else(|e| panic!("{name}: {e}"));
                let want = &case["claims"];
                assert_eq!(c.job, want["job"].as_str().unwrap(), "{name}");
                assert_eq!(
                    c.token.to_string(),
                    want["token"].as_str().unwrap(),
                    "{name}"
                );
                assert_eq!(c.principal, want["principal"].as_str().unwrap(), "{name}");
                assert_eq!(c.holder, want["holder"].as_str().unwrap(), "{name}");
                assert_eq!(c.issued_at, want["iat"].as_u64().unwrap(), "{name}");
                assert_eq!(c.ttl_ms, want["ttl_ms"].as_u64().unwrap(), "{name}");
                assert_eq!(c.kid, want["kid"].as_str().unwrap(), "{name}");
            } else {
                let e = got.err().unwrap_or_else(|| panic!("{name}: accepted"));
                assert_eq!(
                    e.kind.as_str(),
                    case["error"].as_str().unwrap(),
                    "{name}: {e}"
                );
            }
        }
    }

    #[test]
    fn the_signer_writes_the_vectors_byte_for_byte() {
        let v = vectors();
        let signer = Signer::from_pem(v["signing_keys_pem"]["a"].as_str().unwrap()).unwrap();
        let c = &v["signed_by_a"]["claims"];
        let claims = Claims {
            job: c["job"].as_str().unwrap().into(),
            token: c["token"].as_str().unwrap().parse().unwrap(),
            principal: c["principal"].as_str().unwrap().into(),
            holder: c["holder"].as_str().unwrap().into(),
            issued_at: c["iat"].as_u64().unwrap(),
            ttl_ms: c["ttl_ms"].as_u64().unwrap(),
            kid: String::new(),
        };
        assert_eq!(
            signer.sign(&claims),
            v["signed_by_a"]["proof"].as_str().unwrap()
        );
    }

    #[test]
    fn a_generated_key_signs_what_its_set_verifies_and_escapes_round_trip() {
        let signer = Signer::from_pem(&Signer::generate_pem().unwrap()).unwrap();
        let keys = KeySet {
            keys: vec![signer.public().clone()],
        };
        let again = KeySet::from_jwks(&keys.to_jwks()).unwrap();
        assert_eq!(again, keys);
        let claims = Claims {
            job: "a\"b\\c\u{1}ü".into(),
            token: u64::MAX,
            principal: String::new(),
            holder: "h\n".into(),
            issued_at: 1,
            ttl_ms: 2,
            kid: signer.public().kid.clone(),
        };
        let proof = signer.sign(&claims);
        assert_eq!(
            verify_for(&proof, &again, &claims.job, Some(u64::MAX)).unwrap(),
            claims
        );
        let other = Signer::from_pem(&Signer::generate_pem().unwrap()).unwrap();
        let e = verify(
            &proof,
            &KeySet {
                keys: vec![other.public().clone()],
            },
        )
        .unwrap_err();
        assert_eq!(e.kind, ProofErrorKind::UnknownKey);
        assert!(
            Signer::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")
                .is_err()
        );
        assert!(Signer::from_pem("garbage").is_err());
    }
}
