package dev.leasehold.client;

import dev.leasehold.v1.GetSigningKeysResponse;
import dev.leasehold.v1.SigningKey;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.spec.X509EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A server's public signing keys, a JWKS (RFC 7517), as
 * {@link Client#getSigningKeys()} returns it, as {@link #parse} reads it (the
 * {@code jwks} of {@code GetSigningKeysResponse}, or the admin port's
 * {@code GET /keys}), or as {@link #of(GetSigningKeysResponse)} and
 * {@link #fromMap(Map)} (a JWKS another JSON library parsed) build it.
 * {@link Proofs#verify} checks proofs with it. The first key signs new
 * grants; every Ed25519 key listed verifies. Keys of other types are kept
 * (in {@link #keys()}) and never used. Immutable.
 */
public final class KeySet {
  /**
   * One key of the set, a JWK.
   *
   * @param kid the key id (the RFC 7638 thumbprint), or null when the JWK has none
   * @param kty the key type: {@code "OKP"} for Ed25519
   * @param crv the curve: {@code "Ed25519"}
   * @param x the public key, base64url (no padding); null for a key that has none
   * @param signing whether this key signs new grants (the first of the set)
   */
  public record Key(String kid, String kty, String crv, String x, boolean signing) {
    /** Whether this is an Ed25519 key ({@code kty} {@code OKP}, {@code crv} {@code Ed25519}): one that verifies. */
    public boolean isEd25519() {
      return "OKP".equals(kty) && "Ed25519".equals(crv);
    }

    /**
     * The public key, decoded from {@link #x()} (32 bytes for an Ed25519
     * key); null when there is none, or it is not base64url.
     */
    public byte[] publicKey() {
      return Proofs.base64url(x);
    }
  }

  /** DER of an Ed25519 SubjectPublicKeyInfo, before its 32 bytes (RFC 8410). */
  private static final byte[] SPKI_PREFIX = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};

  private static final KeySet EMPTY = new KeySet("{\"keys\":[]}", List.of(), Map.of());

  private final String jwks;
  private final List<Key> keys;
  /** The Ed25519 keys by kid (the first of a kid listed twice). */
  private final Map<String, PublicKey> byKid;

  private KeySet(String jwks, List<Key> keys, Map<String, PublicKey> byKid) {
    this.jwks = jwks;
    this.keys = keys;
    this.byKid = byKid;
  }

  /** A set with no keys: every proof is refused as {@link ProofException.Kind#UNKNOWN_KEY}. */
  public static KeySet empty() {
    return EMPTY;
  }

  /**
   * Reads a JWKS: {@code {"keys":[{"kty":"OKP","crv":"Ed25519","kid":...,"x":...},...]}}.
   *
   * @throws IllegalArgumentException when {@code jwks} is not JSON of that
   *     shape, or an Ed25519 key's {@code x} is not 32 bytes of base64url
   */
  public static KeySet parse(String jwks) {
    Object doc;
    try {
      doc = Json.parse(jwks);
    } catch (Json.ParseException e) {
      throw new IllegalArgumentException("not a JWKS: not JSON: " + e.getMessage(), e);
    }
    if (!(doc instanceof Map<?, ?> m)) {
      throw new IllegalArgumentException("not a JWKS: not a JSON object");
    }
    return build(jwks, keys(m));
  }

  /**
   * The key set of a JWKS already parsed, as a JSON library gives it: a
   * {@code Map} whose {@code "keys"} is a {@code List} of {@code Map}s of
   * strings (Jackson's {@code Map.class}, Gson's, or
   * {@code proof-vectors.json}'s {@code "keys"}). {@link #jwks()} is then
   * the set written back as JSON.
   *
   * @throws IllegalArgumentException as {@link #parse}
   */
  public static KeySet fromMap(Map<?, ?> jwks) {
    List<Key> keys = keys(jwks);
    return build(write(keys), keys);
  }

  private static List<Key> keys(Map<?, ?> m) {
    if (!(m.get("keys") instanceof List<?> list)) {
      throw new IllegalArgumentException("not a JWKS: no \"keys\" array");
    }
    List<Key> keys = new ArrayList<>();
    for (Object o : list) {
      if (!(o instanceof Map<?, ?> k)) {
        throw new IllegalArgumentException("not a JWKS: key " + keys.size() + " is not an object");
      }
      keys.add(new Key(member(k, "kid", keys.size()), member(k, "kty", keys.size()), member(k, "crv", keys.size()),
          member(k, "x", keys.size()), keys.isEmpty()));
    }
    return keys;
  }

  /** {@code keys} as a JWKS. */
  private static String write(List<Key> keys) {
    StringBuilder json = new StringBuilder("{\"keys\":[");
    String sep = "";
    for (Key k : keys) {
      json.append(sep).append('{');
      String inner = "";
      for (String[] f : new String[][] {{"kty", k.kty()}, {"crv", k.crv()},
          {"alg", k.isEd25519() ? "EdDSA" : null}, {"use", k.isEd25519() ? "sig" : null}, {"kid", k.kid()}, {"x", k.x()}}) {
        if (f[1] != null) {
          json.append(inner).append(Json.quote(f[0])).append(':').append(Json.quote(f[1]));
          inner = ",";
        }
      }
      json.append('}');
      sep = ",";
    }
    return json.append("]}").toString();
  }

  /**
   * The key set of a {@code GetSigningKeys} answer: its {@code jwks}, or
   * when that is empty its {@code keys}.
   *
   * @throws IllegalArgumentException as {@link #parse}
   */
  public static KeySet of(GetSigningKeysResponse response) {
    if (!response.getJwks().isEmpty()) {
      return parse(response.getJwks());
    }
    List<Key> keys = new ArrayList<>();
    for (SigningKey k : response.getKeysList()) {
      keys.add(new Key(k.getKid(), "OKP", "Ed25519",
          Base64.getUrlEncoder().withoutPadding().encodeToString(k.getPublicKey().toByteArray()), keys.isEmpty()));
    }
    return build(write(keys), keys);
  }

  private static String member(Map<?, ?> k, String name, int n) {
    Object v = k.get(name);
    if (v == null) {
      return null;
    }
    if (!(v instanceof String s)) {
      throw new IllegalArgumentException("not a JWKS: key " + n + ": \"" + name + "\" is not a string");
    }
    return s;
  }

  private static KeySet build(String jwks, List<Key> keys) {
    Map<String, PublicKey> byKid = new LinkedHashMap<>();
    int n = 0;
    for (Key k : keys) {
      if (k.isEd25519()) {
        byte[] raw = Proofs.base64url(k.x());
        if (raw == null || raw.length != 32) {
          throw new IllegalArgumentException("not a JWKS: key " + n + " (" + k.kid() + "): \"x\" is not a 32-byte "
              + "Ed25519 public key in base64url");
        }
        if (k.kid() != null) {
          byKid.putIfAbsent(k.kid(), publicKey(raw));
        }
      }
      n++;
    }
    return new KeySet(jwks, Collections.unmodifiableList(keys), Collections.unmodifiableMap(byKid));
  }

  private static PublicKey publicKey(byte[] raw) {
    byte[] der = new byte[SPKI_PREFIX.length + raw.length];
    System.arraycopy(SPKI_PREFIX, 0, der, 0, SPKI_PREFIX.length);
    System.arraycopy(raw, 0, der, SPKI_PREFIX.length, raw.length);
    try {
      return KeyFactory.getInstance("Ed25519").generatePublic(new X509EncodedKeySpec(der));
    } catch (GeneralSecurityException e) {
      throw new IllegalArgumentException("not a JWKS: an Ed25519 key the JDK cannot read: " + e.getMessage(), e);
    }
  }

  /** The keys, the signing one first. */
  public List<Key> keys() {
    return keys;
  }

  /** The set as JWKS text: the text it was read from, or for one built from a list, its JWKS. */
  public String jwks() {
    return jwks;
  }

  /** Whether the set has no key: the server signs nothing (etcd mode without {@code --signing-key}). */
  public boolean isEmpty() {
    return keys.isEmpty();
  }

  /** The Ed25519 key named {@code kid}, or null. */
  PublicKey ed25519(String kid) {
    return byKid.get(kid);
  }

  @Override
  public String toString() {
    return "KeySet" + keys.stream().map(Key::kid).toList();
  }
}
