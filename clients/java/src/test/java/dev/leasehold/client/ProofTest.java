package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Grants' proofs against a real server (the single node, which makes its
 * signing key in its data dir on first start): every grant carries a proof
 * that verifies under {@link Client#getSigningKeys()}, renewals keep it, a
 * new grant has a new one, and a checked write takes it instead of the
 * token, fenced as the token would be.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ProofTest {
  static ServerProcess server;
  static Client client;
  static final Duration LONG = Duration.ofSeconds(30);

  @BeforeAll
  static void start() throws Exception {
    server = new ServerProcess();
    client = Client.connect(server.target);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) { // null: skipped, no server binary
      server.close();
    }
  }

  /** {@code proof} with one character of its claims changed to another base64url one. */
  static String altered(String proof) {
    String[] p = proof.split("\\.");
    int i = p[1].length() / 2;
    p[1] = p[1].substring(0, i) + (p[1].charAt(i) == 'A' ? 'B' : 'A') + p[1].substring(i + 1);
    return String.join(".", p);
  }

  @Test
  void signingKeysSyncAsyncAndAdminPort() throws Exception {
    KeySet keys = client.getSigningKeys();
    assertFalse(keys.isEmpty(), "the single node signs with a key of its data dir");
    KeySet.Key first = keys.keys().get(0);
    assertTrue(first.signing());
    assertTrue(first.isEd25519());
    assertEquals(32, first.publicKey().length);
    assertEquals(43, first.kid().length(), first.kid()); // a SHA-256 thumbprint, base64url
    assertEquals(keys.keys(), client.getSigningKeysAsync().get(10, TimeUnit.SECONDS).keys());
    // GET /keys on the admin port: the same JWKS.
    HttpResponse<String> r = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build().send(
        HttpRequest.newBuilder(URI.create("http://" + server.admin + "/keys")).timeout(Duration.ofSeconds(10)).build(),
        HttpResponse.BodyHandlers.ofString());
    assertEquals(200, r.statusCode(), r.body());
    assertEquals(keys.keys(), KeySet.parse(r.body()).keys());
  }

  @Test
  void aGrantsProofVerifiesIsKeptByRenewalsAndANewGrantHasANewOne() throws Exception {
    String job = ClientTest.job("proof");
    KeySet keys = client.getSigningKeys();
    Instant before = Instant.now().minusSeconds(5);
    Lease a = client.acquire(job, "worker-a", LONG).lease();
    assertNotNull(a.proof());
    ProofClaims c = Proofs.verify(a.proof(), keys, job, a.token());
    assertEquals(job, c.job());
    assertEquals(a.token(), c.token());
    assertEquals("worker-a", c.holder());
    assertEquals("", c.principal()); // no policy
    assertEquals(LONG, c.ttl());
    assertEquals(keys.keys().get(0).kid(), c.kid());
    assertTrue(!c.issuedAt().isBefore(before) && !c.issuedAt().isAfter(Instant.now().plusSeconds(5)), c.issuedAt().toString());
    assertEquals(c, Proofs.verify(a.proof(), keys));
    assertEquals(c, Proofs.verify(a.proof(), keys.jwks(), job, a.token()));
    // Another job, another token: refused.
    assertEquals(ProofException.Kind.WRONG_JOB,
        assertThrows(ProofException.class, () -> Proofs.verify(a.proof(), keys, job + "-other", 0)).kind());
    assertEquals(ProofException.Kind.WRONG_TOKEN,
        assertThrows(ProofException.class, () -> Proofs.verify(a.proof(), keys, job, a.token() + 1)).kind());
    assertEquals(ProofException.Kind.BAD_SIGNATURE,
        assertThrows(ProofException.class, () -> Proofs.verify(altered(a.proof()), keys)).kind());
    // Renewals (another TTL too), the lease as read, the async calls: the same proof, byte for byte.
    assertEquals(a.proof(), client.renew(job, "worker-a", a.token(), Duration.ofSeconds(20)).proof());
    assertEquals(a.proof(), client.renewLease(job, "worker-a", a.token(), LONG).lease().proof());
    assertEquals(a.proof(), client.renewAsync(job, "worker-a", a.token(), LONG).get(10, TimeUnit.SECONDS).proof());
    assertEquals(a.proof(), client.getLease(job).proof());
    assertEquals(a.proof(), client.acquire(job, "worker-a", LONG).lease().proof()); // asked again: the same grant
    // A new grant after the release: token + 1, a new proof.
    client.release(job, "worker-a", a.token());
    Lease b = client.acquireAsync(job, "worker-b", LONG).get(10, TimeUnit.SECONDS).lease();
    assertEquals(a.token() + 1, b.token());
    assertNotNull(b.proof());
    assertNotEquals(a.proof(), b.proof());
    ProofClaims cb = Proofs.verify(b.proof(), keys, job, b.token());
    assertEquals("worker-b", cb.holder());
    assertEquals(a.token() + 1, cb.token());
    assertEquals(ProofException.Kind.WRONG_TOKEN,
        assertThrows(ProofException.class, () -> Proofs.verify(b.proof(), keys, job, a.token())).kind());
    // The old one still verifies: it proves the token was issued, not that it is live.
    assertEquals(a.token(), Proofs.verify(a.proof(), keys, job, a.token()).token());
    client.release(job, "worker-b", b.token());
  }

  @Test
  void aCheckedWriteWithTheProofIsFencedAsItsToken() throws Exception {
    String job = ClientTest.job("proof-write");
    Lease a = client.acquire(job, "worker-a", LONG).lease();
    // The proof instead of the token, while the lease is live.
    assertEquals(1, client.checkedWrite(job, a.proof(), "k", "v1"));
    assertEquals(2, client.checkedWrite(job, a.proof(), ClientTest.b("k"), ClientTest.b("v2")));
    assertEquals(3, client.checkedWriteAsync(job, a.proof(), "k", "v3").get(10, TimeUnit.SECONDS));
    Value v = client.read(job, "k");
    assertEquals("v3", v.valueUtf8());
    assertEquals(a.token(), v.token());
    assertEquals(1, client.checkedWrite(job, a.proof(), "gone", "x"));
    assertEquals(2, client.delete(job, a.proof(), ClientTest.b("gone")));
    assertEquals(1, client.checkedWrite(job, a.proof(), "gone2", "x"));
    assertEquals(2, client.deleteAsync(job, a.proof(), ClientTest.b("gone2")).get(10, TimeUnit.SECONDS));
    assertFalse(client.read(job, "gone").found());
    // An altered proof, or one of another job: INVALID_ARGUMENT naming the proof, nothing written.
    InvalidArgumentException bad =
        assertThrows(InvalidArgumentException.class, () -> client.checkedWrite(job, altered(a.proof()), "k", "x"));
    assertEquals("proof", bad.field(), bad.toString());
    ExecutionException badAsync = assertThrows(ExecutionException.class,
        () -> client.checkedWriteAsync(job, altered(a.proof()), "k", "x").get(10, TimeUnit.SECONDS));
    assertTrue(badAsync.getCause() instanceof InvalidArgumentException, badAsync.getCause().toString());
    String other = ClientTest.job("proof-other");
    Lease o = client.acquire(other, "worker-a", LONG).lease();
    assertThrows(InvalidArgumentException.class, () -> client.checkedWrite(job, o.proof(), "k", "x"));
    assertEquals("v3", client.read(job, "k").valueUtf8());
    // The lease passes to another holder: the old proof is fenced.
    client.release(job, "worker-a", a.token());
    Lease b = client.acquire(job, "worker-b", LONG).lease();
    FencedException f = assertThrows(FencedException.class, () -> client.checkedWrite(job, a.proof(), "k", "stale"));
    assertEquals(b.token(), f.currentToken().orElseThrow());
    CompletableFuture<Long> fa = client.checkedWriteAsync(job, a.proof(), "k", "stale");
    ExecutionException fenced = assertThrows(ExecutionException.class, () -> fa.get(10, TimeUnit.SECONDS));
    assertTrue(fenced.getCause() instanceof FencedException, fenced.getCause().toString());
    assertEquals("v3", client.read(job, "k").valueUtf8());
    // The new holder's proof writes.
    assertEquals(4, client.checkedWrite(job, b.proof(), "k", "v4"));
    assertEquals(b.token(), client.read(job, "k").token());
    client.release(job, "worker-b", b.token());
    client.release(other, "worker-a", o.token());
  }

  @Test
  void theElectorExposesItsGrantsProof() throws Exception {
    String job = ClientTest.job("proof-elector");
    KeySet keys = client.getSigningKeys();
    Elector e = Elector.builder(client, job, "el").ttl(Duration.ofSeconds(3)).start();
    try {
      long t = e.awaitElected(ServerProcess.PATIENCE).orElseThrow();
      String proof = e.proof().orElseThrow();
      ProofClaims c = Proofs.verify(proof, keys, job, t);
      assertEquals(e.holder(), c.holder());
      assertEquals(Duration.ofSeconds(3), c.ttl());
      assertEquals(proof, client.getLease(job).proof());
      // Renewals (every second) keep it.
      server.waitRenewals(server.metric("leasehold_renewals_total") + 2, () -> { });
      assertEquals(proof, e.proof().orElseThrow());
      // The proof writes for the elector's lead.
      assertEquals(1, client.checkedWrite(job, proof, "status", "ok"));
    } finally {
      e.close();
    }
    assertTrue(e.proof().isEmpty());
    assertTrue(e.token().isEmpty());
  }
}
