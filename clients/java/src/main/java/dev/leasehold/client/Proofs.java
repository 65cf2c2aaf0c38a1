package dev.leasehold.client;

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.PublicKey;
import java.security.Signature;
import java.time.Duration;
import java.time.Instant;
import java.util.Base64;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * Verifies a grant's proof ({@link Lease#proof()}): a JWS (compact,
 * EdDSA over Ed25519) in which the server states that it issued token T of
 * job J to holder H. Storage that leasehold does not own checks it with the
 * server's public keys ({@link Client#getSigningKeys()}) before it compares
 * tokens, so that a token nobody issued is refused. On the JDK's EdDSA
 * alone (Java 15+). The format: docs/proofs.md.
 *
 * <p>A proof proves that the token was <em>issued</em>, to that holder, for
 * that job; not that the lease is still <em>live</em>: a paused leader keeps
 * a true proof after its lease has passed on. The fence is still the
 * comparison with the stored token; only the server's own
 * {@link Client#checkedWrite} knows which token is live.
 *
 * <pre>{@code
 * KeySet keys = client.getSigningKeys(); // once; again when a proof names an unknown key
 * ProofClaims c = Proofs.verify(proof, keys, "bridge_health", 0); // throws ProofException
 * // then: UPDATE ... WHERE fence_token <= c.token() (unsigned)
 * }</pre>
 */
public final class Proofs {
  private Proofs() {}

  /** The only {@code typ} accepted. */
  public static final String TYP = "leasehold-proof+jwt";

  private static final Pattern B64URL = Pattern.compile("[A-Za-z0-9_-]*");
  private static final Pattern U64 = Pattern.compile("[1-9][0-9]{0,19}");
  private static final BigInteger LONG_MAX = BigInteger.valueOf(Long.MAX_VALUE);

  /**
   * Verifies {@code proof} with {@code keys} and returns its claims.
   *
   * @throws ProofException when it is refused; its {@link ProofException#kind()}
   *     is the first of, in this order: {@code MALFORMED} (not three base64url
   *     parts without padding, or a header that is not a JSON object),
   *     {@code UNSUPPORTED} ({@code alg} not {@code EdDSA} or {@code typ} not
   *     {@code leasehold-proof+jwt}), {@code UNKNOWN_KEY} (a {@code kid} that
   *     names no Ed25519 key of the set), {@code BAD_SIGNATURE}, then
   *     {@code MALFORMED} (claims that are not a JSON object of the format's
   *     types, an {@code iss} not {@code leasehold}, a token that is not a
   *     decimal u64 above 0)
   */
  public static ProofClaims verify(String proof, KeySet keys) {
    return verify(proof, keys, null, 0);
  }

  /**
   * {@link #verify(String, KeySet)}, checking that the proof is of
   * {@code job} (unless null) and of {@code token} (unsigned; unless 0, which
   * no grant has).
   *
   * @throws ProofException as {@link #verify(String, KeySet)}, and then
   *     {@code WRONG_JOB} for another job, {@code WRONG_TOKEN} for another token
   */
  public static ProofClaims verify(String proof, KeySet keys, String job, long token) {
    if (proof == null) {
      throw new ProofException(ProofException.Kind.MALFORMED, "no proof (null)");
    }
    if (keys == null) {
      throw new NullPointerException("keys");
    }
    // 1. Three base64url parts, no padding; a header that is a JSON object.
    String[] parts = proof.split("\\.", -1);
    if (parts.length != 3) {
      throw malformed("not three parts joined by dots (" + parts.length + ")");
    }
    byte[][] raw = new byte[3][];
    for (int p = 0; p < 3; p++) {
      raw[p] = base64url(parts[p]);
      if (raw[p] == null) {
        throw malformed("part " + (p + 1) + " is not base64url without padding");
      }
    }
    Map<?, ?> header = object(raw[0], "the header");
    if (header == null) {
      throw malformed("the header is not a JSON object");
    }
    // 2. EdDSA, our typ.
    Object alg = header.get("alg");
    if (!"EdDSA".equals(alg)) {
      throw new ProofException(ProofException.Kind.UNSUPPORTED, "alg " + show(alg) + ", not \"EdDSA\"");
    }
    Object typ = header.get("typ");
    if (!TYP.equals(typ)) {
      throw new ProofException(ProofException.Kind.UNSUPPORTED, "typ " + show(typ) + ", not \"" + TYP + "\"");
    }
    // 3. A key of the set.
    Object kid = header.get("kid");
    PublicKey key = kid instanceof String k ? keys.ed25519(k) : null;
    if (key == null) {
      throw new ProofException(ProofException.Kind.UNKNOWN_KEY, "kid " + show(kid) + " names no Ed25519 key of the set "
          + keys);
    }
    // 4. The signature, over the ASCII of header_b64 "." claims_b64.
    byte[] signed = (parts[0] + "." + parts[1]).getBytes(StandardCharsets.US_ASCII);
    boolean good;
    try {
      Signature v = Signature.getInstance("Ed25519");
      v.initVerify(key);
      v.update(signed);
      good = raw[2].length == 64 && v.verify(raw[2]);
    } catch (GeneralSecurityException e) {
      good = false;
    }
    if (!good) {
      throw new ProofException(ProofException.Kind.BAD_SIGNATURE, "the signature does not verify with key " + kid);
    }
    // 5. The claims.
    Map<?, ?> c = object(raw[1], "the claims");
    if (c == null) {
      throw malformed("the claims are not a JSON object");
    }
    String iss = string(c, "iss");
    if (!"leasehold".equals(iss)) {
      throw malformed("iss " + Json.quote(iss) + ", not \"leasehold\"");
    }
    String claimedJob = string(c, "job");
    String tokenText = string(c, "token");
    if (!U64.matcher(tokenText).matches()) {
      throw malformed("token " + Json.quote(tokenText) + " is not a decimal u64 above 0");
    }
    long claimedToken;
    try {
      claimedToken = Long.parseUnsignedLong(tokenText);
    } catch (NumberFormatException e) {
      throw malformed("token " + tokenText + " is above the largest u64");
    }
    String principal = string(c, "principal");
    String holder = string(c, "holder");
    long iat = integer(c, "iat");
    long ttlMs = integer(c, "ttl_ms");
    // 6. What the caller expects.
    if (job != null && !job.equals(claimedJob)) {
      throw new ProofException(ProofException.Kind.WRONG_JOB, "a proof for job " + Json.quote(claimedJob) + ", not "
          + Json.quote(job));
    }
    if (token != 0 && token != claimedToken) {
      throw new ProofException(ProofException.Kind.WRONG_TOKEN, "a proof of token " + tokenText + ", not "
          + Long.toUnsignedString(token));
    }
    return new ProofClaims(claimedJob, claimedToken, holder, principal, Instant.ofEpochSecond(iat),
        Duration.ofMillis(ttlMs), (String) kid);
  }

  /**
   * {@link #verify(String, KeySet)} with the key set as JWKS text.
   *
   * @throws IllegalArgumentException when {@code jwks} is not a JWKS ({@link KeySet#parse})
   */
  public static ProofClaims verify(String proof, String jwks) {
    return verify(proof, KeySet.parse(jwks));
  }

  /**
   * {@link #verify(String, KeySet, String, long)} with the key set as JWKS text.
   *
   * @throws IllegalArgumentException when {@code jwks} is not a JWKS ({@link KeySet#parse})
   */
  public static ProofClaims verify(String proof, String jwks, String job, long token) {
    return verify(proof, KeySet.parse(jwks), job, token);
  }

  private static ProofException malformed(String message) {
    return new ProofException(ProofException.Kind.MALFORMED, message);
  }

  /**
   * The bytes of {@code s}, base64url without padding, strictly: only
   * {@code A-Z a-z 0-9 - _}, no {@code =}, and in its one canonical form
   * (no stray bits in the last character). Null when it is not.
   */
  static byte[] base64url(String s) {
    if (s == null || !B64URL.matcher(s).matches() || s.length() % 4 == 1) {
      return null;
    }
    byte[] b;
    try {
      b = Base64.getUrlDecoder().decode(s);
    } catch (IllegalArgumentException e) {
      return null;
    }
    return Base64.getUrlEncoder().withoutPadding().encodeToString(b).equals(s) ? b : null;
  }

  /** The JSON object that {@code raw} holds as UTF-8, or null when it holds none. */
  private static Map<?, ?> object(byte[] raw, String what) {
    String text;
    try {
      text = StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(raw)).toString();
    } catch (CharacterCodingException e) {
      return null;
    }
    try {
      return Json.parse(text) instanceof Map<?, ?> m ? m : null;
    } catch (Json.ParseException e) {
      return null;
    }
  }

  private static String string(Map<?, ?> claims, String name) {
    if (!(claims.get(name) instanceof String s)) {
      throw malformed("claim \"" + name + "\" is " + (claims.containsKey(name) ? "not a string" : "missing"));
    }
    return s;
  }

  private static long integer(Map<?, ?> claims, String name) {
    if (!(claims.get(name) instanceof BigInteger n) || n.signum() < 0 || n.compareTo(LONG_MAX) > 0) {
      throw malformed("claim \"" + name + "\" is " + (claims.containsKey(name) ? "not a non-negative integer" : "missing"));
    }
    return n.longValueExact();
  }

  /** A header value for a message. */
  private static String show(Object v) {
    return v instanceof String s ? Json.quote(s) : v == null ? "missing" : String.valueOf(v);
  }
}
