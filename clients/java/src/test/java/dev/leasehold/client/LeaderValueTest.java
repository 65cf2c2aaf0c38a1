package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The leader's value ({@code Lease.value}) against a real server: an
 * elector publishes it with its grants and changes it with
 * {@link Elector#setValue}; another elector reads it with
 * {@link Elector#leader()} and hears it in {@code onNewLeader}; an
 * observation hears it, and its change as VALUE_CHANGED; the history's
 * tenure keeps the grant's. Through the client: Acquire publishes it,
 * Renew keeps, replaces or clears it, and a value over 1024 bytes is the
 * typed invalid-argument error naming {@code value}, with nothing changed.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class LeaderValueTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final Duration LONG = Duration.ofSeconds(60);
  /** The electors' TTL: a renewal (and so a value set) every second. */
  static final Duration TTL = Duration.ofSeconds(3);

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /**
   * Elector A leads with value "10.0.0.1:8080"; elector B (value
   * "10.0.0.2:8080") waits and reads A's value with {@code leader()} and in
   * {@code onNewLeader}; an observation hears A's grant with it. A's
   * {@code setValue} reaches the server with its next renewal: the
   * observation hears VALUE_CHANGED (same holder, same token, the new
   * value), {@code leader()} reads the new value, and onNewLeader reports
   * no new leader for it. A closes: B leads with token 2 and its own value,
   * heard by both. The history keeps each grant's value (A's first one: a
   * renewal's change is not recorded there).
   */
  @Test
  void anElectorsValueIsSeenByLeaderObserveOnNewLeaderAndHistory() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "routed";
      ObserveTest.Heard heard = new ObserveTest.Heard();
      List<String> leaders = new ArrayList<>();
      try (Observation o = client.observe(job, heard)) {
        assertEquals(LeaseEvent.Kind.CURRENT, heard.next().kind());
        Elector a = Elector.builder(client, job, "a").ttl(TTL).value("10.0.0.1:8080").start();
        Elector b = null;
        try {
          assertEquals(1, a.awaitElected(PATIENCE).orElseThrow());
          assertEquals("10.0.0.1:8080", new String(a.value(), StandardCharsets.UTF_8));
          LeaseEvent granted = heard.next();
          assertEquals(LeaseEvent.Kind.ACQUIRED, granted.kind());
          assertEquals(a.holder(), granted.lease().holder());
          assertEquals("10.0.0.1:8080", granted.lease().valueUtf8());

          b = Elector.builder(client, job, "b").ttl(TTL).value(utf8("10.0.0.2:8080"))
              .onNewLeader((holder, token, value) -> {
                synchronized (leaders) {
                  leaders.add(holder + "=" + token + "@" + new String(value, StandardCharsets.UTF_8));
                }
              }).start();
          server.waitWaiters(1); // B waits behind A
          Lease seen = b.leader();
          assertEquals(a.holder(), seen.holder());
          assertEquals(1, seen.token());
          assertArrayEquals(utf8("10.0.0.1:8080"), seen.value());
          Lease seenAsync = b.leaderAsync().get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
          assertEquals(a.holder(), seenAsync.holder());
          assertEquals("10.0.0.1:8080", seenAsync.valueUtf8());
          String aFirst = a.holder() + "=1@10.0.0.1:8080";
          ServerProcess.waitUntil(PATIENCE, "onNewLeader hears A with its value",
              () -> ObserveTest.snapshot(leaders).contains(aFirst));

          // A's new value goes with its next renewal.
          a.setValue("10.0.0.1:9090");
          LeaseEvent changed = heard.next();
          assertEquals(LeaseEvent.Kind.VALUE_CHANGED, changed.kind());
          assertEquals(a.holder(), changed.lease().holder());
          assertEquals(1, changed.lease().token());
          assertEquals("10.0.0.1:9090", changed.lease().valueUtf8());
          assertEquals("10.0.0.1:9090", b.leader().valueUtf8());

          // A value over the limit is refused by the elector at once; nothing changes.
          assertThrows(IllegalArgumentException.class, () -> a.setValue(new byte[Client.MAX_VALUE_BYTES + 1]));
          assertEquals("10.0.0.1:9090", new String(a.value(), StandardCharsets.UTF_8));
          assertThrows(IllegalArgumentException.class,
              () -> Elector.builder(client, job, "c").value(new byte[Client.MAX_VALUE_BYTES + 1]));

          a.close(); // releases: B is granted token 2
          assertEquals(2, b.awaitElected(PATIENCE).orElseThrow());
          // The release (if not folded into the grant: a free job has no
          // value), then B's grant with its value.
          LeaseEvent bGranted = heard.next();
          if (bGranted.kind() == LeaseEvent.Kind.RELEASED) {
            assertFalse(bGranted.lease().hasValue(), "a free job has no value: " + bGranted);
            bGranted = heard.next();
          }
          assertEquals(LeaseEvent.Kind.ACQUIRED, bGranted.kind(), bGranted.toString());
          assertEquals(2, bGranted.lease().token());
          assertEquals(b.holder(), bGranted.lease().holder());
          assertEquals("10.0.0.2:8080", bGranted.lease().valueUtf8());
          Lease bLeads = b.leader();
          assertEquals(b.holder(), bLeads.holder());
          assertEquals("10.0.0.2:8080", bLeads.valueUtf8());
          String bSecond = b.holder() + "=2@10.0.0.2:8080";
          ServerProcess.waitUntil(PATIENCE, "onNewLeader hears B with its value",
              () -> ObserveTest.snapshot(leaders).contains(bSecond));
          // A value change is not a new leader: one report per grant, in token order.
          assertEquals(List.of(aFirst, bSecond), ObserveTest.snapshot(leaders));
        } finally {
          a.close();
          if (b != null) {
            b.close();
          }
        }
      }

      // The history: each grant's value, as published with the grant.
      List<Tenure> history = client.history(job);
      assertEquals(2, history.size(), history.toString());
      assertEquals(2, history.get(0).token());
      assertEquals("10.0.0.2:8080", history.get(0).valueUtf8());
      assertEquals(1, history.get(1).token());
      assertArrayEquals(utf8("10.0.0.1:8080"), history.get(1).value());
    }
  }

  /**
   * The client's Acquire publishes a value; Renew without one keeps it,
   * with one replaces it, with an empty one clears it; a repeated Acquire
   * by the live holder replaces it. A value over 1024 bytes, to Acquire or
   * Renew, is {@link InvalidArgumentException} with {@code field()}
   * {@code "value"}, and nothing changed; exactly 1024 bytes is taken.
   */
  @Test
  void acquireAndRenewCarryTheValueAndOneOver1024BytesIsRefusedNamingValue() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "valued";
      Lease l = client.acquire(job, "h", LONG, Duration.ZERO, utf8("v1")).lease();
      long t = l.token();
      assertEquals("v1", l.valueUtf8());
      assertEquals("v1", client.getLease(job).valueUtf8());

      assertEquals("v1", client.renew(job, "h", t, LONG).valueUtf8(), "no value: kept");
      assertEquals("v2", client.renew(job, "h", t, LONG, utf8("v2")).valueUtf8(), "a value: replaced");
      assertEquals("v2", client.getLease(job).valueUtf8());
      Renewed r = client.renewLease(job, "h", t, LONG, new byte[0]);
      assertFalse(r.lease().hasValue(), "empty: cleared");
      assertArrayEquals(new byte[0], client.getLease(job).value());
      assertEquals("v3", client.renewAsync(job, "h", t, LONG, utf8("v3")).get(PATIENCE.toSeconds(), TimeUnit.SECONDS)
          .valueUtf8());
      assertEquals("v3", client.renewLeaseAsync(job, "h", t, LONG, null).get(PATIENCE.toSeconds(), TimeUnit.SECONDS)
          .lease().valueUtf8(), "null: kept");

      // A repeated Acquire by the live holder replaces it: same token.
      Acquired again = client.acquire(job, "h", LONG, Duration.ZERO, utf8("v4"));
      assertTrue(again.acquired());
      assertEquals(t, again.lease().token());
      assertEquals("v4", client.getLease(job).valueUtf8());

      // Over 1024 bytes: the typed error naming the field; nothing changed.
      byte[] big = new byte[Client.MAX_VALUE_BYTES + 1];
      Arrays.fill(big, (byte) 'x');
      InvalidArgumentException renewBig = assertThrows(InvalidArgumentException.class,
          () -> client.renew(job, "h", t, LONG, big));
      assertEquals("value", renewBig.field());
      Lease after = client.getLease(job);
      assertEquals("h", after.holder());
      assertEquals(t, after.token());
      assertEquals("v4", after.valueUtf8());
      InvalidArgumentException acquireBig = assertThrows(InvalidArgumentException.class,
          () -> client.acquire("other", "h", LONG, Duration.ZERO, big));
      assertEquals("value", acquireBig.field());
      Lease other = client.getLease("other");
      assertFalse(other.isHeld(), "nothing granted: " + other);
      assertEquals(0, other.token());
      assertTrue(client.history("other").isEmpty());
      java.util.concurrent.ExecutionException async = assertThrows(java.util.concurrent.ExecutionException.class,
          () -> client.acquireAsync("other", "h", LONG, Duration.ZERO, false, false, big)
              .get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
      assertEquals("value", ((InvalidArgumentException) async.getCause()).field());

      // Exactly the limit is taken.
      byte[] most = Arrays.copyOf(big, Client.MAX_VALUE_BYTES);
      assertArrayEquals(most, client.renew(job, "h", t, LONG, most).value());
      assertArrayEquals(most, client.getLease(job).value());

      // The history's tenure keeps the grant's value (v1), not later ones.
      List<Tenure> history = client.history(job);
      assertEquals(1, history.size());
      assertEquals("v1", history.get(0).valueUtf8());
    }
  }

  /** A Lease's value is copied in and out, and compared byte for byte. */
  @Test
  void aLeasesValueIsItsOwnAndComparedByContent() {
    byte[] v = utf8("addr");
    Lease a = new Lease("j", "h", 1, null, null, null, null, v);
    v[0] = 'X';
    assertEquals("addr", a.valueUtf8(), "copied in");
    a.value()[0] = 'Y';
    assertEquals("addr", a.valueUtf8(), "copied out");
    assertEquals(a, new Lease("j", "h", 1, null, null, null, null, utf8("addr")));
    assertEquals(a.hashCode(), new Lease("j", "h", 1, null, null, null, null, utf8("addr")).hashCode());
    assertFalse(a.equals(new Lease("j", "h", 1, null, null, null, null, utf8("other"))));
    Lease none = new Lease("j", "h", 1, null, null);
    assertFalse(none.hasValue());
    assertEquals("", none.valueUtf8());
    assertEquals(none, new Lease("j", "h", 1, null, null, null, null, new byte[0]));
  }
}
