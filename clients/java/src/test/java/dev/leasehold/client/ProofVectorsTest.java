package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.leasehold.v1.GetSigningKeysResponse;
import dev.leasehold.v1.SigningKey;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link Proofs#verify} against every case of
 * clients/conformance/proof-vectors.json (the verdict every client must
 * reach), and the key set's forms. Needs no server.
 */
class ProofVectorsTest {
  static final Path VECTORS = Paths.get("..", "conformance", "proof-vectors.json");

  static Map<?, ?> vectors() throws Exception {
    return (Map<?, ?>) Json.parse(Files.readString(VECTORS, StandardCharsets.UTF_8));
  }

  static KeySet keys() throws Exception {
    return KeySet.fromMap((Map<?, ?>) vectors().get("keys"));
  }

  /** The text of the vectors' "keys", as a server would send it. */
  static String jwksText() throws Exception {
    return keys().jwks();
  }

  static Stream<Arguments> cases() throws Exception {
    return ((List<?>) vectors().get("cases")).stream().map(c -> Arguments.of(((Map<?, ?>) c).get("name"), c));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void vector(String name, Map<?, ?> c) throws Exception {
    KeySet keys = keys();
    String proof = (String) c.get("proof");
    String job = (String) c.get("job");
    long token = c.get("token") == null ? 0 : Long.parseUnsignedLong((String) c.get("token"));
    if (Boolean.TRUE.equals(c.get("ok"))) {
      Map<?, ?> want = (Map<?, ?>) c.get("claims");
      for (ProofClaims got : List.of(Proofs.verify(proof, keys, job, token), Proofs.verify(proof, jwksText(), job, token))) {
        assertEquals(want.get("job"), got.job());
        assertEquals(want.get("token"), Long.toUnsignedString(got.token()));
        assertEquals(want.get("principal"), got.principal());
        assertEquals(want.get("holder"), got.holder());
        assertEquals(Instant.ofEpochSecond(((BigInteger) want.get("iat")).longValueExact()), got.issuedAt());
        assertEquals(Duration.ofMillis(((BigInteger) want.get("ttl_ms")).longValueExact()), got.ttl());
        assertEquals(want.get("kid"), got.kid());
      }
      if (job == null && token == 0) {
        assertEquals(Proofs.verify(proof, keys), Proofs.verify(proof, jwksText()));
      }
    } else {
      ProofException e = assertThrows(ProofException.class, () -> Proofs.verify(proof, keys, job, token));
      assertEquals(c.get("error"), e.kind().description(), e.getMessage());
      assertTrue(e.getMessage().startsWith("proof refused (" + c.get("error") + "): "), e.getMessage());
      ProofException t = assertThrows(ProofException.class, () -> Proofs.verify(proof, jwksText(), job, token));
      assertEquals(e.kind(), t.kind());
    }
  }

  @Test
  void everyKindIsAVectorsClass() throws Exception {
    List<String> classes = Arrays.stream(ProofException.Kind.values()).map(ProofException.Kind::description).toList();
    assertEquals(List.of("malformed", "unsupported", "unknown key", "bad signature", "wrong job", "wrong token"), classes);
    for (Object c : (List<?>) vectors().get("cases")) {
      Object error = ((Map<?, ?>) c).get("error");
      assertTrue(error == null || classes.contains(error), String.valueOf(error));
    }
  }

  static String good() throws Exception {
    return (String) ((Map<?, ?>) vectors().get("signed_by_a")).get("proof");
  }

  @Test
  void base64urlIsStrict() throws Exception {
    String good = good();
    KeySet keys = keys();
    String[] p = good.split("\\.");
    // The standard alphabet's characters, whitespace, a padded part: malformed.
    for (String bad : new String[] {
        p[0] + "." + p[1].substring(0, 10) + "+" + p[1].substring(11) + "." + p[2],
        p[0] + "." + p[1] + "." + p[2].substring(0, 10) + "+" + p[2].substring(11),
        p[0] + "." + p[1] + "." + p[2].substring(0, 10) + "/" + p[2].substring(11),
        p[0] + " ." + p[1] + "." + p[2],
        p[0] + "." + p[1] + "." + p[2] + "==",
        p[0] + "." + p[1] + "." + p[2] + "\n",
        good + ".",
        "..",
        p[0] + "." + p[1] + "." + p[2].substring(0, 85), // 85 characters: 1 left over, no byte
    }) {
      ProofException e = assertThrows(ProofException.class, () -> Proofs.verify(bad, keys), bad);
      assertEquals(ProofException.Kind.MALFORMED, e.kind(), e.getMessage());
    }
    // The signature's last character carries 4 spare bits: only the one
    // canonical form is taken.
    char last = p[2].charAt(p[2].length() - 1);
    String alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char other = alphabet.charAt(alphabet.indexOf(last) ^ 1);
    String stray = p[0] + "." + p[1] + "." + p[2].substring(0, p[2].length() - 1) + other;
    assertEquals(ProofException.Kind.MALFORMED, assertThrows(ProofException.class, () -> Proofs.verify(stray, keys)).kind());
    assertEquals(ProofException.Kind.MALFORMED, assertThrows(ProofException.class, () -> Proofs.verify(null, keys)).kind());
  }

  /** A proof signed by the vectors' key a over {@code header} and {@code claims} (JSON text). */
  static String signA(String header, String claims) throws Exception {
    return signA(header.getBytes(StandardCharsets.UTF_8), claims.getBytes(StandardCharsets.UTF_8));
  }

  /** A proof signed by the vectors' key a over {@code header} and {@code claims} (bytes). */
  static String signA(byte[] header, byte[] claims) throws Exception {
    java.security.KeyFactory kf = java.security.KeyFactory.getInstance("Ed25519");
    String pem = (String) ((Map<?, ?>) vectors().get("signing_keys_pem")).get("a");
    byte[] der = Base64.getMimeDecoder().decode(pem.replaceAll("-----[A-Z ]+-----", ""));
    java.security.PrivateKey sk = kf.generatePrivate(new java.security.spec.PKCS8EncodedKeySpec(der));
    Base64.Encoder b64 = Base64.getUrlEncoder().withoutPadding();
    String input = b64.encodeToString(header) + "." + b64.encodeToString(claims);
    java.security.Signature s = java.security.Signature.getInstance("Ed25519");
    s.initSign(sk);
    s.update(input.getBytes(StandardCharsets.US_ASCII));
    return input + "." + b64.encodeToString(s.sign());
  }

  @Test
  void signedHereVerifiesAndBadShapesAreRefusedInOrder() throws Exception {
    KeySet keys = keys();
    String kid = keys.keys().get(0).kid();
    String header = "{\"alg\":\"EdDSA\",\"kid\":\"" + kid + "\",\"typ\":\"leasehold-proof+jwt\"}";
    String claims = "{\"iss\":\"leasehold\",\"job\":\"j\",\"token\":\"7\",\"principal\":\"\",\"holder\":\"h\","
        + "\"iat\":1,\"ttl_ms\":2,\"extra\":[1,{\"x\":null}]}";
    // The JDK's signer agrees with the vectors' (deterministic signatures).
    Map<?, ?> a = (Map<?, ?>) vectors().get("signed_by_a");
    assertEquals(good(), signA("{\"alg\":\"EdDSA\",\"kid\":\"" + kid + "\",\"typ\":\"leasehold-proof+jwt\"}",
        "{\"iss\":\"leasehold\",\"job\":\"bridge_health\",\"token\":\"7\",\"principal\":\"ops\",\"holder\":\"worker-a@5f0c\","
            + "\"iat\":1764892800,\"ttl_ms\":10000}"));
    assertEquals("bridge_health", ((Map<?, ?>) a.get("claims")).get("job"));
    // Header members in another order, whitespace, unknown claims: fine.
    ProofClaims c = Proofs.verify(signA(" { \"typ\" : \"leasehold-proof+jwt\", \"kid\":\"" + kid + "\",\"alg\":\"EdDSA\"} ", claims),
        keys, "j", 7);
    assertEquals(new ProofClaims("j", 7, "h", "", Instant.ofEpochSecond(1), Duration.ofMillis(2), kid), c);
    // Refusals, each of its class.
    Object[][] bad = {
        {"[]", claims, ProofException.Kind.MALFORMED},
        {"{\"alg\":\"EdDSA\",\"alg\":\"EdDSA\",\"kid\":\"" + kid + "\",\"typ\":\"leasehold-proof+jwt\"}", claims,
            ProofException.Kind.MALFORMED},
        {"{\"kid\":\"" + kid + "\",\"typ\":\"leasehold-proof+jwt\"}", claims, ProofException.Kind.UNSUPPORTED},
        {"{\"alg\":\"EdDSA\",\"kid\":\"" + kid + "\"}", claims, ProofException.Kind.UNSUPPORTED},
        {"{\"alg\":\"EdDSA\",\"typ\":\"leasehold-proof+jwt\"}", claims, ProofException.Kind.UNKNOWN_KEY},
        {"{\"alg\":\"EdDSA\",\"kid\":7,\"typ\":\"leasehold-proof+jwt\"}", claims, ProofException.Kind.UNKNOWN_KEY},
        {header, "[]", ProofException.Kind.MALFORMED},
        {header, claims.replace("\"iat\":1", "\"iat\":1.5"), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"iat\":1", "\"iat\":-1"), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"ttl_ms\":2", "\"ttl_ms\":\"2\""), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"holder\":\"h\",", ""), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"principal\":\"\"", "\"principal\":null"), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"token\":\"7\"", "\"token\":7"), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"token\":\"7\"", "\"token\":\"07\""), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"token\":\"7\"", "\"token\":\"+7\""), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"token\":\"7\"", "\"token\":\"-1\""), ProofException.Kind.MALFORMED},
        {header, claims.replace("\"iss\":\"leasehold\",", ""), ProofException.Kind.MALFORMED},
        {header, claims + " x", ProofException.Kind.MALFORMED},
        {header, claims.replace("\"job\":\"j\"", "\"job\":\"j\",\"job\":\"other\""), ProofException.Kind.MALFORMED},
    };
    for (Object[] b : bad) {
      String proof = signA((String) b[0], (String) b[1]);
      ProofException e = assertThrows(ProofException.class, () -> Proofs.verify(proof, keys), b[0] + " " + b[1]);
      assertEquals(b[2], e.kind(), b[0] + " " + b[1] + ": " + e.getMessage());
    }
    // Claims that are not UTF-8: malformed once signed, a bad signature before.
    byte[] latin1 = claims.replace("\"h\"", "\"h\u00e9\"").getBytes(StandardCharsets.ISO_8859_1);
    String notUtf8 = signA(header.getBytes(StandardCharsets.UTF_8), latin1);
    assertEquals(ProofException.Kind.MALFORMED, assertThrows(ProofException.class, () -> Proofs.verify(notUtf8, keys)).kind());
    String unsigned = notUtf8.substring(0, notUtf8.lastIndexOf('.') + 1);
    assertEquals(ProofException.Kind.BAD_SIGNATURE, assertThrows(ProofException.class, () -> Proofs.verify(unsigned, keys)).kind());
    // A header that is not UTF-8: malformed, before anything else.
    String badHeader = signA(("{\"alg\":\"EdDSA\",\"kid\":\"" + kid + "\",\"typ\":\"leasehold-proof+jwt\",\"x\":\"\u00e9\"}")
        .getBytes(StandardCharsets.ISO_8859_1), claims.getBytes(StandardCharsets.UTF_8));
    assertEquals(ProofException.Kind.MALFORMED, assertThrows(ProofException.class, () -> Proofs.verify(badHeader, keys)).kind());
  }

  @Test
  void keySetForms() throws Exception {
    KeySet fromMap = keys();
    assertEquals(2, fromMap.keys().size());
    assertTrue(fromMap.keys().get(0).signing());
    assertFalse(fromMap.keys().get(1).signing());
    assertTrue(fromMap.keys().get(0).isEd25519());
    assertEquals(32, fromMap.keys().get(0).publicKey().length);
    // The text it writes reads back to the same keys.
    KeySet fromText = KeySet.parse(fromMap.jwks());
    assertEquals(fromMap.keys(), fromText.keys());
    assertEquals(fromMap.jwks(), fromText.jwks());
    // A GetSigningKeys answer: by its jwks, or by its list when jwks is empty.
    GetSigningKeysResponse.Builder r = GetSigningKeysResponse.newBuilder();
    for (KeySet.Key k : fromMap.keys()) {
      r.addKeys(SigningKey.newBuilder().setKid(k.kid()).setPublicKey(ByteString.copyFrom(k.publicKey())).setSigning(k.signing()));
    }
    KeySet fromList = KeySet.of(r.build());
    assertEquals(fromMap.keys(), fromList.keys());
    KeySet fromJwks = KeySet.of(r.setJwks(fromMap.jwks()).build());
    assertEquals(fromMap.keys(), fromJwks.keys());
    for (KeySet k : List.of(fromText, fromList, fromJwks)) {
      assertEquals("bridge_health", Proofs.verify(good(), k, "bridge_health", 7).job());
    }
    // The empty set, and keys of other types: known to nobody.
    assertTrue(KeySet.parse("{\"keys\":[]}").isEmpty());
    assertTrue(KeySet.of(GetSigningKeysResponse.getDefaultInstance()).isEmpty());
    assertEquals(ProofException.Kind.UNKNOWN_KEY,
        assertThrows(ProofException.class, () -> Proofs.verify(good(), KeySet.empty())).kind());
    String kid = fromMap.keys().get(0).kid();
    String x = fromMap.keys().get(0).x();
    KeySet otherTypes = KeySet.parse("{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"X25519\",\"kid\":\"" + kid + "\",\"x\":\"" + x
        + "\"},{\"kty\":\"RSA\",\"kid\":\"" + kid + "\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}");
    assertEquals(2, otherTypes.keys().size());
    assertNull(otherTypes.ed25519(kid));
    assertEquals(ProofException.Kind.UNKNOWN_KEY,
        assertThrows(ProofException.class, () -> Proofs.verify(good(), otherTypes)).kind());
    // Not a JWKS.
    for (String bad : new String[] {"", "[]", "{}", "{\"keys\":{}}", "{\"keys\":[1]}", "{\"keys\":[{\"kid\":1}]}",
        "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"k\",\"x\":\"AAAA\"}]}",
        "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"k\"}]}",
        "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"k\",\"x\":\"" + x + "=\"}]}"}) {
      assertThrows(IllegalArgumentException.class, () -> KeySet.parse(bad), bad);
      assertThrows(IllegalArgumentException.class, () -> Proofs.verify(good(), bad), bad);
    }
  }

  @Test
  void jsonIsStrict() throws Exception {
    assertEquals(Map.of("a", List.of(BigInteger.ONE, "é\n\"", true, false)),
        Json.parse(" {\"a\":[1,\"\\u00e9\\n\\\"\",true,false]} "));
    assertEquals(Arrays.asList((Object) null), Json.parse("[null]"));
    for (String bad : new String[] {"", "{", "{\"a\":1,}", "[1,]", "01", "1.", "-", "\"\t\"", "'a'", "{a:1}", "[1] [2]",
        "\"\\x\"", "\"\\u12\"", "tru", "{\"a\":1,\"a\":2}", "nul"}) {
      assertThrows(Json.ParseException.class, () -> Json.parse(bad), bad);
    }
  }
}
