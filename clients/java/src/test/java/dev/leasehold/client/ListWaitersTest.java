package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The candidates: {@link Client#listWaiters} against a real server lists
 * the Acquires waiting for a job in line order (the preferred first, even
 * one that queued later, then the others, first come first served), with
 * the total waiting; a limit lists fewer but counts all; a job nobody
 * waits for, or that does not exist, is an empty line, not an error.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ListWaitersTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final Duration LONG = Duration.ofSeconds(60);
  /** How long the waiters' Acquires wait: far longer than the test. */
  static final Duration WAIT = Duration.ofMinutes(5);

  static List<String> holders(Waiters w) {
    return w.waiters().stream().map(Waiter::holder).toList();
  }

  @Test
  void twoWaitersAreListedInLineOrderThePreferredFirstAndAnUnknownJobIsEmpty() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "line";
      long t = client.acquire(job, "leader", LONG).lease().token();
      assertTrue(client.listWaiters(job).isEmpty(), "nobody waits yet");

      // "plain" queues first, "pref" (preferred) after it.
      CompletableFuture<Acquired> plain = client.acquireAsync(job, "plain", LONG, WAIT);
      server.waitWaiters(1);
      CompletableFuture<Acquired> pref = client.acquireAsync(job, "pref", LONG, WAIT, false, true);
      server.waitWaiters(2);

      Waiters line = client.listWaiters(job, 0);
      assertEquals(2, line.waiting());
      assertEquals(List.of("pref", "plain"), holders(line), "the preferred first: " + line);
      assertTrue(line.waiters().get(0).preferred());
      assertFalse(line.waiters().get(1).preferred());
      assertEquals(null, line.waiters().get(0).principal(), "no policy");
      assertFalse(line.isEmpty());

      // A limit lists the first in line, and still counts every waiter.
      Waiters first = client.listWaiters(job, 1);
      assertEquals(2, first.waiting());
      assertEquals(List.of("pref"), holders(first));
      Waiters async = client.listWaitersAsync(job, 0).get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
      assertEquals(List.of("pref", "plain"), holders(async));
      assertEquals(2, async.waiting());

      // A job nobody knows: an empty line, not an error.
      Waiters unknown = client.listWaiters("no-such-job", 0);
      assertEquals(0, unknown.waiting());
      assertTrue(unknown.waiters().isEmpty());
      assertTrue(unknown.isEmpty());
      assertThrows(IllegalArgumentException.class, () -> client.listWaiters(job, -1));

      // The line is the order of the hand-over: the release grants "pref".
      client.release(job, "leader", t);
      Acquired granted = pref.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
      assertTrue(granted.acquired());
      assertEquals(t + 1, granted.lease().token());
      Waiters rest = client.listWaiters(job);
      assertEquals(1, rest.waiting());
      assertEquals(List.of("plain"), holders(rest));
      assertFalse(plain.isDone(), "plain still waits");

      client.release(job, "pref", t + 1);
      assertTrue(plain.get(PATIENCE.toSeconds(), TimeUnit.SECONDS).acquired());
      assertTrue(client.listWaiters(job).isEmpty(), "nobody waits any more");
    }
  }

  /** Electors waiting in line are listed by their holders, a preferred elector first. */
  @Test
  void waitingElectorsAreListedByTheirHolders() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "electors";
      long t = client.acquire(job, "leader", LONG).lease().token();
      // TTL 20 s: each campaign's Acquire waits 30 s before it is sent
      // again, so the line holds still while it is read.
      try (Elector plain = Elector.builder(client, job, "plain").ttl(Duration.ofSeconds(20)).start()) {
        server.waitWaiters(1);
        try (Elector pref = Elector.builder(client, job, "pref").ttl(Duration.ofSeconds(20)).preferred(true).start()) {
          server.waitWaiters(2);
          Waiters line = client.listWaiters(job, 0);
          assertEquals(2, line.waiting(), line.toString());
          // The preferred one is first whatever happened to the other's place.
          assertEquals(pref.holder(), line.waiters().get(0).holder());
          assertTrue(line.waiters().get(0).preferred());
          assertEquals(plain.holder(), line.waiters().get(1).holder());
          client.release(job, "leader", t);
          assertEquals(t + 1, pref.awaitElected(PATIENCE).orElseThrow());
        }
      }
    }
  }
}
