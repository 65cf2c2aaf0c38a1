package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * TLS, mutual TLS, bearer tokens and the policy, against the real server
 * started with the certificates and policy of clients/tools/pki.sh (alice
 * may lease, write and read every job; bob may only read jobs "bob/...").
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SecurityTest {
  static ServerProcess server;
  static final Duration LONG = Duration.ofSeconds(30);

  @BeforeAll
  static void start() throws Exception {
    server = ServerProcess.secure();
  }

  @AfterAll
  static void stop() throws Exception {
    if (server != null) { // null: skipped, no server binary
      server.close();
    }
  }

  static Path file(String name) {
    return server.pki.resolve(name);
  }

  static String secret(Path pki, String who) throws Exception {
    return Files.readString(pki.resolve(who + ".token"));
  }

  static Client connect(Security.Builder b) {
    return Client.connect(server.target, b.build());
  }

  static Security.Builder withCa() {
    return Security.builder().caFile(file("ca.pem"));
  }

  @Test
  void tlsWithATokenAcquiresRenewsWritesAndReads() throws Exception {
    String job = ClientTest.job("tls");
    try (Client c = connect(withCa().token(secret(server.pki, "alice")))) {
      Acquired a = c.acquire(job, "w", LONG);
      assertTrue(a.acquired());
      assertEquals("alice", a.lease().principal());
      long t = a.lease().token();
      assertEquals(t, c.renew(job, "w", t, LONG).token());
      assertEquals(1, c.checkedWrite(job, t, "k", "v"));
      assertEquals("v", new String(c.read(job, "k").value()));
      Lease l = c.getLease(job);
      assertEquals("w", l.holder());
      assertEquals("alice", l.principal());
      try (WriteStream s = c.writeStream()) {
        List<WriteOutcome> out = s.write(List.of(StreamWrite.put(job, t, "s", "1")));
        assertEquals(WriteOutcome.Kind.WRITTEN, out.get(0).kind());
      }
      c.release(job, "w", t);
    }
  }

  @Test
  void aGrantsProofNamesItsPrincipal() throws Exception {
    String job = ClientTest.job("tls-proof");
    try (Client c = connect(withCa().token(secret(server.pki, "alice")))) {
      Lease l = c.acquire(job, "w", LONG).lease();
      ProofClaims claims = Proofs.verify(l.proof(), c.getSigningKeys(), job, l.token());
      assertEquals("alice", claims.principal());
      assertEquals("w", claims.holder());
      assertEquals(1, c.checkedWrite(job, l.proof(), "k", "v"));
      c.release(job, "w", l.token());
    }
  }

  @Test
  void theCaMayBeGivenAsBytes() throws Exception {
    try (Client c = connect(Security.builder().ca(Files.readAllBytes(file("ca.pem"))).token(secret(server.pki, "alice")))) {
      assertTrue(c.acquire(ClientTest.job("pem"), "w", LONG).acquired());
    }
  }

  @Test
  void noTokenIsUnauthenticated() {
    try (Client c = connect(withCa())) {
      UnauthenticatedException e = assertThrows(UnauthenticatedException.class, () -> c.acquire(ClientTest.job("none"), "w", LONG));
      assertEquals("UNAUTHENTICATED", e.reason());
      assertFalse(e.isRetryable());
    }
  }

  @Test
  void aWrongTokenIsUnauthenticatedOnCallsAndStreams() {
    try (Client c = connect(withCa().token("not-a-secret-of-anyone"))) {
      UnauthenticatedException e = assertThrows(UnauthenticatedException.class, () -> c.read(ClientTest.job("wrong"), "k"));
      assertFalse(e.toString().contains("not-a-secret"));
      try (WriteStream s = c.writeStream()) {
        assertThrows(UnauthenticatedException.class,
            () -> s.write(List.of(StreamWrite.put(ClientTest.job("wrong"), 1, "k", "v"))));
      } catch (LeaseholdException closing) {
        // the broken stream may say so again on close
      }
    }
  }

  @Test
  void aPrincipalWithoutTheGrantIsDeniedNamingActionAndJob() throws Exception {
    String job = ClientTest.job("denied");
    try (Client c = connect(withCa().token(secret(server.pki, "bob")))) {
      PermissionDeniedException e = assertThrows(PermissionDeniedException.class, () -> c.acquire(job, "w", LONG));
      assertEquals("lease", e.action());
      assertEquals(job, e.job());
      assertFalse(e.isRetryable());
      assertFalse(c.read("bob/" + job, "k").found());
    }
  }

  @Test
  void mutualTlsWithAClientCertificate() throws Exception {
    String job = ClientTest.job("mtls");
    try (Client a = connect(withCa().clientCertificate(file("alice.pem"), file("alice-key.pem")));
        Client b = connect(withCa().clientCertificate(
            Files.readAllBytes(file("bob.pem")), Files.readAllBytes(file("bob-key.pem"))))) {
      Acquired r = a.acquire(job, "w", LONG);
      assertTrue(r.acquired());
      assertEquals("alice", r.lease().principal());
      PermissionDeniedException e =
          assertThrows(PermissionDeniedException.class, () -> b.checkedWrite(job, r.lease().token(), "k", "v"));
      assertEquals("write", e.action());
      assertEquals(job, e.job());
    }
  }

  @Test
  void theElectorLeadsOverTlsWithAToken() throws Exception {
    String job = ClientTest.job("elector");
    try (Client c = connect(withCa().token(secret(server.pki, "alice")));
        Elector e = Elector.builder(c, job, "e").ttl(LONG).start()) {
      long t = e.awaitElected(ServerProcess.PATIENCE).orElseThrow();
      assertEquals(1, c.checkedWrite(job, t, "k", "v"));
    }
  }

  @Test
  void anElectorRefusedByThePolicyStopsAndSaysWhy() throws Exception {
    try (Client c = connect(withCa().token(secret(server.pki, "bob")));
        Elector e = Elector.builder(c, ClientTest.job("refused"), "e").ttl(Duration.ofSeconds(5)).start()) {
      assertThrows(PermissionDeniedException.class, () -> e.awaitElected(ServerProcess.PATIENCE));
      assertTrue(e.error().orElseThrow() instanceof PermissionDeniedException);
    }
  }

  @Test
  void anHttpsTargetIsTls() throws Exception {
    // Without the test CA the system's roots cannot verify the server: the
    // channel is TLS (the handshake fails), never plaintext.
    try (Client owner = Client.connect("https://" + server.target)) {
      Client c = owner.withTimeout(Duration.ofSeconds(5));
      assertThrows(UnavailableException.class, () -> c.getLease("x"));
    }
    try (Client c = Client.connect("https://" + server.target, withCa().token(secret(server.pki, "alice")).build())) {
      assertFalse(c.getLease("x").isHeld());
    }
  }

  @Test
  void theSettingsNeverShowTheToken() {
    Security s = Security.builder().token("very-secret").build();
    assertFalse(s.toString().contains("very-secret"));
    assertFalse(BearerToken.of("very-secret").toString().contains("very-secret"));
    assertThrows(IllegalArgumentException.class, () -> BearerToken.of("two words"));
  }

  @Test
  void aTokenWithoutTlsGoesInPlaintextToAServerWithAPolicy() throws Exception {
    try (ServerProcess plain = ServerProcess.withPolicyOnly();
        Client c = Client.connect("http://" + plain.target, Security.builder().token(secret(plain.pki, "alice")).build());
        Client anon = Client.connect(plain.target)) {
      String job = ClientTest.job("plain");
      assertEquals("alice", c.acquire(job, "w", LONG).lease().principal());
      assertThrows(UnauthenticatedException.class, () -> anon.getLease(job));
    }
  }
}
