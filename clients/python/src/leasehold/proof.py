"""Verifying a grant's proof (``Lease.proof``), as docs/proofs.md specifies.

Every grant the server makes carries a proof: a JWS in compact
serialization, signed with EdDSA over Ed25519, stating that this server
issued token T of job J to holder H. Storage that leasehold does not own (a
database, a file, an object store, another service) verifies it with the
server's public keys before it compares tokens, so that a token nobody
issued (a client that invents token 2^63) is refused::

    import leasehold
    from leasehold import proof

    keys = client.signing_keys()              # a KeySet; or the JWKS of GET /keys
    claims = proof.verify(lease.proof, keys, job="bridge_health")
    if claims.token < stored_token:
        ...                                   # stale: refuse the write

**A proof proves that the token was issued**, to that holder, for that job.
**It does not prove that the lease is still live**: a paused leader keeps a
valid proof after its lease has passed to a successor. The fence is still
the comparison "token at least the stored one"; the proof only makes sure
that every token compared was really issued.

The signature check needs the ``cryptography`` package: install the
``leasehold[proof]`` extra. It is imported on first use, so the rest of the
client works without it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from .errors import ProofError, ProofErrorKind

__all__ = ["KeySet", "Keys", "ProofClaims", "ProofError", "ProofErrorKind", "verify", "ALG", "TYP", "ISSUER"]

#: The only ``alg`` a proof may name.
ALG = "EdDSA"
#: The only ``typ`` a proof may name.
TYP = "leasehold-proof+jwt"
#: The only ``iss`` a proof's claims may name.
ISSUER = "leasehold"

_U64_MAX = (1 << 64) - 1
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_DECIMAL = re.compile(r"[0-9]+")


def _b64url_decode(part: str) -> Optional[bytes]:
    """The bytes of an unpadded base64url string, or ``None`` when it is not
    one: '=' padding, any character outside the URL-safe alphabet, an
    impossible length, or unused bits that are not zero (an encoding that is
    not the canonical one)."""
    if not _B64URL.fullmatch(part) or len(part) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        return None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != part:
        return None
    return raw


def _json_object(raw: bytes) -> Optional[Dict[str, Any]]:
    try:
        v = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return v if isinstance(v, dict) else None


_crypto: Any = None


def _ed25519():
    """cryptography's Ed25519 module and its InvalidSignature, imported on
    first use: the ``leasehold[proof]`` extra."""
    global _crypto
    if _crypto is None:
        try:
            from cryptography.exceptions import InvalidSignature
            from cryptography.hazmat.primitives.asymmetric import ed25519
        except ImportError as e:
            raise ImportError(
                "verifying a leasehold proof needs the 'cryptography' package: "
                "install the extra, pip install 'leasehold[proof]'"
            ) from e
        _crypto = (ed25519, InvalidSignature)
    return _crypto


@dataclass(frozen=True)
class ProofClaims:
    """What a proof that verified states: the server issued ``token`` of
    ``job`` to ``holder`` (of ``principal``), at ``issued_at``, with a TTL of
    ``ttl_ms``, signed by the key ``kid``. It says nothing of whether the
    lease is still live."""

    job: str
    #: The fencing token (1 to 2^64 - 1).
    token: int
    #: The holder, as its client named it (``Lease.holder``).
    holder: str
    #: The principal of the server's policy the grant is bound to; ``""`` on
    #: a server without a policy.
    principal: str
    #: When the token was granted: wall clock, seconds since the Unix epoch
    #: (the claim ``iat``).
    issued_at: int
    #: The TTL the token was granted with, in milliseconds (``ttl_ms``).
    ttl_ms: int
    #: The id of the key that signed it (the header's ``kid``).
    kid: str

    @property
    def ttl(self) -> float:
        """The TTL the token was granted with, in seconds."""
        return self.ttl_ms / 1000.0


class KeySet:
    """A server's public keys: a JWKS (RFC 7517) as ``GET /keys`` on the
    admin port and ``Leases.GetSigningKeys`` serve it. ``KeySet(jwks)``
    takes the JWKS as a JSON string (or bytes) or as the parsed object;
    :meth:`from_pb` a ``GetSigningKeysResponse``;
    :meth:`leasehold.Client.signing_keys` returns one.

    Only Ed25519 keys (``kty`` ``OKP``, ``crv`` ``Ed25519``) verify proofs;
    other keys of the set are kept in :attr:`jwks` and ignored. The first
    key signs new grants; every one listed verifies.

    Raises ``ValueError`` when it is not a JWKS, or when an Ed25519 key of
    it has no ``kid`` or an ``x`` that is not 32 bytes in unpadded
    base64url."""

    __slots__ = ("_jwks", "_keys")

    def __init__(self, jwks: Union[str, bytes, Mapping[str, Any]]) -> None:
        if isinstance(jwks, (str, bytes, bytearray)):
            try:
                doc = json.loads(jwks)
            except ValueError as e:
                raise ValueError(f"key set: not JSON: {e}") from None
        else:
            doc = jwks
        if not isinstance(doc, Mapping) or not isinstance(doc.get("keys"), list):
            raise ValueError('key set: not a JWKS (a JSON object with a "keys" list)')
        keys: Dict[str, bytes] = {}
        for i, k in enumerate(doc["keys"]):
            if not isinstance(k, Mapping) or k.get("kty") != "OKP" or k.get("crv") != "Ed25519":
                continue
            kid, x = k.get("kid"), k.get("x")
            if not isinstance(kid, str) or not kid:
                raise ValueError(f"key set: Ed25519 key {i} has no kid")
            raw = _b64url_decode(x) if isinstance(x, str) else None
            if raw is None or len(raw) != 32:
                raise ValueError(f"key set: Ed25519 key {kid!r}: x is not 32 bytes in unpadded base64url")
            keys.setdefault(kid, raw)
        self._jwks: Mapping[str, Any] = doc
        self._keys = keys

    @classmethod
    def parse(cls, keys: "Keys") -> "KeySet":
        """``keys`` itself when it is a :class:`KeySet`, else
        ``KeySet(keys)``."""
        return keys if isinstance(keys, KeySet) else cls(keys)

    @classmethod
    def from_pb(cls, response: Any) -> "KeySet":
        """The key set of a ``GetSigningKeysResponse`` (its ``jwks``)."""
        return cls(response.jwks or '{"keys":[]}')

    @property
    def jwks(self) -> Mapping[str, Any]:
        """The JWKS, as parsed: pass it on to other JOSE tools, or store it."""
        return self._jwks

    @property
    def kids(self) -> List[str]:
        """The ids of the Ed25519 keys, in the set's order: the first signs
        new grants."""
        return list(self._keys)

    @property
    def signing_kid(self) -> Optional[str]:
        """The id of the key that signs new grants (the first), or ``None``
        when the set is empty (the server signs nothing)."""
        return next(iter(self._keys), None)

    def public_key(self, kid: str) -> Optional[bytes]:
        """The 32-byte Ed25519 public key named ``kid``, or ``None``."""
        return self._keys.get(kid)

    def to_json(self) -> str:
        """The JWKS as compact JSON."""
        return json.dumps(self._jwks, separators=(",", ":"))

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeySet) and self._keys == other._keys

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"KeySet(kids={self.kids!r})"


#: What a key set may be given as: a KeySet, or the JWKS as JSON (str or
#: bytes) or as the parsed object.
Keys = Union[KeySet, str, bytes, Mapping[str, Any]]


def _split(proof: Union[str, bytes]) -> Tuple[str, str, bytes, bytes, bytes]:
    """Step 1: (header_b64, claims_b64, header, claims, signature) of a
    proof, or a MALFORMED refusal."""
    if isinstance(proof, (bytes, bytearray)):
        try:
            proof = bytes(proof).decode("ascii")
        except UnicodeDecodeError:
            raise ProofError(ProofErrorKind.MALFORMED, "the proof is not ASCII") from None
    if not isinstance(proof, str):
        raise ProofError(ProofErrorKind.MALFORMED, f"the proof is a {type(proof).__name__}, not a string")
    if not proof:
        raise ProofError(ProofErrorKind.MALFORMED, "the proof is empty")
    parts = proof.split(".")
    if len(parts) != 3:
        raise ProofError(ProofErrorKind.MALFORMED, f"not three dot-separated parts but {len(parts)}")
    decoded = []
    for name, part in zip(("header", "claims", "signature"), parts):
        if "=" in part:
            raise ProofError(ProofErrorKind.MALFORMED, f"the {name} is padded with '=' (base64url takes none)")
        raw = _b64url_decode(part)
        if raw is None:
            raise ProofError(ProofErrorKind.MALFORMED, f"the {name} is not unpadded base64url")
        decoded.append(raw)
    return parts[0], parts[1], decoded[0], decoded[1], decoded[2]


def _claim(claims: Mapping[str, Any], name: str, kind: type) -> Any:
    v = claims.get(name)
    if not isinstance(v, kind) or isinstance(v, bool):
        what = "a string" if kind is str else "an integer"
        raise ProofError(ProofErrorKind.MALFORMED, f"the claim {name!r} is missing or not {what}")
    if kind is int and not 0 <= v <= _U64_MAX:
        raise ProofError(ProofErrorKind.MALFORMED, f"the claim {name!r} is out of range: {v}")
    return v


def verify(
    proof: Union[str, bytes],
    keys: Keys,
    job: Optional[str] = None,
    token: Optional[int] = None,
) -> ProofClaims:
    """Verifies ``proof`` (a grant's ``Lease.proof``) with the server's
    ``keys`` (a :class:`KeySet`, or the JWKS as a JSON string or the parsed
    object) and returns its :class:`ProofClaims`. With ``job``, the proof
    must be for that job; with ``token``, for that token.

    Raises :class:`~leasehold.ProofError`, whose ``kind`` says why, checking
    in this order (docs/proofs.md):

    1. not three unpadded base64url parts, or a header that is not a JSON
       object: ``MALFORMED``;
    2. ``alg`` other than ``EdDSA`` or ``typ`` other than
       ``leasehold-proof+jwt``: ``UNSUPPORTED``;
    3. a ``kid`` that names no Ed25519 key of ``keys``: ``UNKNOWN_KEY`` (a
       key that was rotated out, or another server's);
    4. a signature that does not verify: ``BAD_SIGNATURE`` (forged or
       altered);
    5. claims that are not a JSON object of the documented types, an
       ``iss`` other than ``leasehold``, or a token that is not a decimal
       u64 above 0: ``MALFORMED``;
    6. another job than ``job``: ``WRONG_JOB``; another token than
       ``token``: ``WRONG_TOKEN``.

    A proof that verifies proves the token was issued, not that the lease
    is still live: compare its token with the one stored (at least the
    stored one) to fence. Raises ``ValueError`` when ``keys`` is not a
    JWKS, and ``ImportError`` when the ``cryptography`` package (the
    ``leasehold[proof]`` extra) is not installed."""
    ed25519, invalid_signature = _ed25519()
    key_set = KeySet.parse(keys)

    # 1. Three base64url parts, a header that is a JSON object.
    header_b64, claims_b64, header_raw, claims_raw, signature = _split(proof)
    header = _json_object(header_raw)
    if header is None:
        raise ProofError(ProofErrorKind.MALFORMED, "the header is not a JSON object")

    # 2. EdDSA, and a leasehold proof.
    alg, typ = header.get("alg"), header.get("typ")
    if alg != ALG:
        raise ProofError(ProofErrorKind.UNSUPPORTED, f"alg {alg!r}: only {ALG!r} is accepted")
    if typ != TYP:
        raise ProofError(ProofErrorKind.UNSUPPORTED, f"typ {typ!r}: only {TYP!r} is accepted")

    # 3. A key of the set.
    kid = header.get("kid")
    public = key_set.public_key(kid) if isinstance(kid, str) else None
    if public is None:
        raise ProofError(
            ProofErrorKind.UNKNOWN_KEY,
            f"kid {kid!r} names no Ed25519 key of the set (rotated out, or another server's key)",
        )

    # 4. The signature, over the ASCII of header_b64 "." claims_b64.
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(public).verify(
            signature, f"{header_b64}.{claims_b64}".encode("ascii")
        )
    except invalid_signature:
        raise ProofError(ProofErrorKind.BAD_SIGNATURE, f"the signature does not verify with key {kid!r}") from None

    # 5. The claims.
    claims = _json_object(claims_raw)
    if claims is None:
        raise ProofError(ProofErrorKind.MALFORMED, "the claims are not a JSON object")
    iss = _claim(claims, "iss", str)
    if iss != ISSUER:
        raise ProofError(ProofErrorKind.MALFORMED, f"iss {iss!r}: not {ISSUER!r}")
    claimed_job = _claim(claims, "job", str)
    raw_token = _claim(claims, "token", str)
    digits = raw_token.lstrip("0")
    if not _DECIMAL.fullmatch(raw_token) or raw_token.startswith("0") or len(digits) > 20 or not 0 < int(digits or "0") <= _U64_MAX:
        raise ProofError(ProofErrorKind.MALFORMED, f"the token {raw_token!r} is not a decimal u64 above 0 without leading zeros")
    out = ProofClaims(
        job=claimed_job,
        token=int(raw_token),
        holder=_claim(claims, "holder", str),
        principal=_claim(claims, "principal", str),
        issued_at=_claim(claims, "iat", int),
        ttl_ms=_claim(claims, "ttl_ms", int),
        kid=kid,
    )

    # 6. What the caller expects.
    if job is not None and out.job != job:
        raise ProofError(ProofErrorKind.WRONG_JOB, f"the proof is for job {out.job!r}, not {job!r}")
    if token is not None and out.token != token:
        raise ProofError(ProofErrorKind.WRONG_TOKEN, f"the proof is for token {out.token}, not {token}")
    return out
