package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link ElectorSet} against a real server: one set leads many jobs and
 * keeps them over several TTLs, renewing over one KeepAlive stream and
 * never a unary Renew; a job expired by the chaos API steps down alone and
 * is campaigned for again; with the server frozen each job steps down at
 * its own deadline; two sets on the same jobs, one leads each, and closing
 * it hands every job over; a refused campaign stops that job alone; a
 * failure a campaign does not foresee is logged and the job campaigned for
 * again.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class ElectorSetTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final String KEEP_ALIVE = "method=\"KeepAlive\"";
  static final String RENEW = "method=\"Renew\"";

  /** What a set's listener heard, with when. */
  static final class Events implements ElectorSet.Listener {
    record Event(String what, String job, long token, long at) {}

    final List<Event> events = new ArrayList<>();

    @Override
    public synchronized void onElected(String job, long token) {
      events.add(new Event("elected", job, token, System.nanoTime()));
    }

    @Override
    public synchronized void onLost(String job, long token) {
      events.add(new Event("lost", job, token, System.nanoTime()));
    }

    synchronized List<Event> of(String what, String job) {
      return events.stream().filter(e -> e.what.equals(what) && e.job.equals(job)).toList();
    }

    synchronized List<Event> all(String what) {
      return events.stream().filter(e -> e.what.equals(what)).toList();
    }
  }

  static String[] jobs(String prefix, int n) {
    String[] out = new String[n];
    for (int i = 0; i < n; i++) {
      out[i] = prefix + i;
    }
    return out;
  }

  static double metric(ServerProcess s, String name, String label) {
    try {
      return s.metric(name, label);
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  static double metric(ServerProcess s, String name) {
    try {
      return s.metric(name);
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  @Test
  void oneSetLeadsManyJobsAndRenewsThemOverOneKeepAliveStream() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      int n = 8;
      String[] jobs = jobs("fleet-", n);
      Events events = new Events();
      try (ElectorSet set = ElectorSet.builder(client, "fleet").ttl(Duration.ofMillis(1500)).listener(events)
          .jobs(jobs).start()) {
        assertTrue(set.holder().startsWith("fleet@"), set.holder());
        ServerProcess.waitUntil(PATIENCE, "every job led", () -> set.leading().size() == n);
        for (String j : jobs) {
          assertEquals(set.holder(), client.getLease(j).holder());
          assertEquals(1, set.token(j).getAsLong());
        }
        double renews = metric(server, "leasehold_rpc_duration_seconds_count", RENEW);
        double renewals = metric(server, "leasehold_renewals_total");
        // Three TTLs of renewals (every ttl/3, n each), all leases kept.
        server.waitRenewals(renewals + 9 * n, () -> { });
        assertEquals(n, set.leading().size(), "every lease kept: " + set.leading());
        assertTrue(events.all("lost").isEmpty(), "no loss: " + events.all("lost"));
        assertEquals(n, events.all("elected").size());
        assertEquals(renews, metric(server, "leasehold_rpc_duration_seconds_count", RENEW),
            "no unary Renew: the renewals go over KeepAlive");
        assertTrue(metric(server, "leasehold_rpc_duration_seconds_count", KEEP_ALIVE) >= 1, "a KeepAlive stream was opened");
        for (String j : jobs) {
          assertEquals(1, client.getLease(j).token(), "renewals keep the token");
        }
      }
      // close() released every lease and reported each as lost.
      for (String j : jobs) {
        assertFalse(client.getLease(j).isHeld(), j + " released");
      }
      assertEquals(n, events.all("lost").size());
    }
  }

  @Test
  void aChaosExpiredJobStepsDownAloneAndIsCampaignedForAgain() throws Exception {
    try (ServerProcess server = ServerProcess.withArgs("--enable-chaos"); Client client = Client.connect(server.target)) {
      String[] jobs = jobs("chaos-fleet-", 3);
      Events events = new Events();
      try (ElectorSet set = ElectorSet.builder(client, "fleet").ttl(Duration.ofSeconds(3)).listener(events)
          .jobs(jobs).start()) {
        ServerProcess.waitUntil(PATIENCE, "every job led", () -> set.leading().size() == 3);
        client.chaos().expire(jobs[1]);
        ServerProcess.waitUntil(PATIENCE, "job 1 lost and led again",
            () -> events.of("elected", jobs[1]).size() == 2);
        assertEquals(List.of(1L), events.of("lost", jobs[1]).stream().map(Events.Event::token).toList());
        assertEquals(2, events.of("elected", jobs[1]).get(1).token(), "campaigned for again: the next token");
        assertEquals(2, set.token(jobs[1]).getAsLong());
        assertTrue(events.of("lost", jobs[0]).isEmpty() && events.of("lost", jobs[2]).isEmpty(),
            "the other jobs kept: " + events.all("lost"));
        assertEquals(1, set.token(jobs[0]).getAsLong());
        assertEquals(1, set.token(jobs[2]).getAsLong());
        assertEquals(set.holder(), client.getLease(jobs[1]).holder());
      }
    }
  }

  /**
   * A job granted after the set's last renewal has a later deadline than
   * the jobs it renewed: with the server frozen, each steps down at its
   * own. (If a renewal happens to go out between that grant and the
   * freeze, the deadlines meet; the round is done again with new jobs.)
   */
  @Test
  void withTheServerFrozenEachJobStepsDownAtItsOwnDeadline() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Duration ttl = Duration.ofSeconds(4);
      long slack = TimeUnit.SECONDS.toNanos(3); // a loaded machine's scheduling, generously
      Events events = new Events();
      try (ElectorSet set = ElectorSet.builder(client, "fleet").ttl(ttl).listener(events).start()) {
        for (int round = 0; ; round++) {
          String early = "early-" + round;
          String late = "late-" + round;
          long blocker = client.acquire(late, "blocker", Duration.ofMinutes(1)).lease().token();
          set.campaign(early);
          set.campaign(late);
          ServerProcess.waitUntil(PATIENCE, "the early job led", () -> set.isLeader(early));
          // Spread the grants on purpose (a pause, not a wait for a state):
          // the late job is granted half a renewal period after the early
          // job's last grant or renewal was sent, its deadline so much later.
          long spreadUntil = set.deadlineNanos(early).getAsLong() - ttl.toNanos() + ttl.toNanos() / 6;
          while (System.nanoTime() - spreadUntil < 0) {
            Thread.sleep(5);
          }
          client.release(late, "blocker", blocker);
          ServerProcess.waitUntil(PATIENCE, "the late job led", () -> set.isLeader(late));
          server.signal("STOP");
          long stopped = System.nanoTime();
          try {
            long dEarly = set.deadlineNanos(early).orElse(0);
            long dLate = set.deadlineNanos(late).orElse(0);
            if (dLate - dEarly < TimeUnit.MILLISECONDS.toNanos(300) && round < 4) {
              continue; // a renewal went out between the grant and the freeze
            }
            assertTrue(dLate - dEarly >= TimeUnit.MILLISECONDS.toNanos(300),
                "the late job's deadline is later: " + (dLate - dEarly) / 1_000_000 + " ms");
            ServerProcess.waitUntil(PATIENCE, "both stepped down",
                () -> !events.of("lost", early).isEmpty() && !events.of("lost", late).isEmpty());
            long lostEarly = events.of("lost", early).get(0).at();
            long lostLate = events.of("lost", late).get(0).at();
            // Each at its own deadline: not before it, and soon after it.
            assertTrue(lostEarly - dEarly >= 0 && lostEarly - dEarly < slack,
                "early: " + (lostEarly - dEarly) / 1_000_000 + " ms after its deadline");
            assertTrue(lostLate - dLate >= 0 && lostLate - dLate < slack,
                "late: " + (lostLate - dLate) / 1_000_000 + " ms after its deadline");
            assertTrue(lostLate - lostEarly > 0, "the late job stepped down after the early one");
            // And no later than a TTL after the freeze, whatever the machine.
            assertTrue(lostLate - stopped < ttl.toNanos() + slack);
            assertFalse(set.isLeader(early));
            assertFalse(set.isLeader(late));
            System.err.printf("frozen: early stepped down %d ms, late %d ms after the freeze%n",
                (lostEarly - stopped) / 1_000_000, (lostLate - stopped) / 1_000_000);
            return;
          } finally {
            server.signal("CONT");
          }
        }
      }
    }
  }

  @Test
  void twoSetsOnTheSameJobsOneLeadsEachAndClosingHandsOver() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String[] jobs = jobs("pair-", 4);
      Events a = new Events();
      Events b = new Events();
      ElectorSet first = ElectorSet.builder(client, "fleet").ttl(Duration.ofSeconds(3)).listener(a).jobs(jobs).start();
      try (ElectorSet second = ElectorSet.builder(client, "fleet").ttl(Duration.ofSeconds(3)).listener(b).start()) {
        assertNotEquals(first.holder(), second.holder(), "one holder per set");
        try {
          ServerProcess.waitUntil(PATIENCE, "the first set leads every job", () -> first.leading().size() == jobs.length);
          for (String j : jobs) {
            second.campaign(j);
          }
          server.waitWaiters(jobs.length); // the second set waits for each
          assertTrue(second.leading().isEmpty(), "one leader per job");
          assertTrue(b.all("elected").isEmpty());
        } finally {
          first.close(); // resign: releases every lease, handing each over at once
        }
        for (String j : jobs) {
          assertFalse(first.isLeader(j));
        }
        ServerProcess.waitUntil(PATIENCE, "the second set leads every job", () -> second.leading().size() == jobs.length);
        Map<String, Long> expected = new TreeMap<>();
        for (String j : jobs) {
          expected.put(j, 2L);
          assertEquals(second.holder(), client.getLease(j).holder());
        }
        assertEquals(expected, second.leading());
        assertEquals(jobs.length, a.all("lost").size(), "the first set reported each job lost on close");
      }
      for (String j : jobs) {
        assertFalse(client.getLease(j).isHeld(), "closing the second set released " + j);
      }
    }
  }

  @Test
  void aCampaignRefusedForGoodStopsThatJobAlone() throws Exception {
    try (ServerProcess server = ServerProcess.withArgs("--max-name-bytes", "64");
        Client client = Client.connect(server.target)) {
      String tooLong = "j".repeat(100);
      try (ElectorSet set = ElectorSet.builder(client, "fleet").ttl(Duration.ofSeconds(3)).jobs("fine").start()) {
        set.campaign(tooLong);
        ServerProcess.waitUntil(PATIENCE, "the refusal", () -> set.error(tooLong).isPresent());
        assertInstanceOf(InvalidArgumentException.class, set.error(tooLong).get());
        ServerProcess.waitUntil(PATIENCE, "the other job led", () -> set.isLeader("fine"));
        assertTrue(set.error("fine").isEmpty());
        assertThrows(IllegalArgumentException.class, () -> set.campaign(""));
      }
      assertThrows(IllegalArgumentException.class, () -> ElectorSet.builder(client, ""));
      assertThrows(IllegalArgumentException.class, () -> ElectorSet.builder(client, "x").ttl(Duration.ZERO));
    }
  }

  /**
   * A failure nothing in the campaign expects (here injected once, right
   * after a grant) is an ERROR log, and the job is campaigned for again:
   * the set never silently stops campaigning for a job.
   */
  @Test
  void anUnforeseenFailureInACampaignIsLoggedAndTheJobCampaignedForAgain() throws Exception {
    PrintStream err = System.err;
    ByteArrayOutputStream logged = new ByteArrayOutputStream();
    System.setErr(new PrintStream(new OutputStream() { // slf4j-simple's stderr, kept and passed on
      @Override
      public void write(int b) {
        synchronized (logged) {
          logged.write(b);
        }
        err.write(b);
      }

      @Override
      public void write(byte[] b, int off, int len) {
        synchronized (logged) {
          logged.write(b, off, len);
        }
        err.write(b, off, len);
      }
    }, true, StandardCharsets.UTF_8));
    String job = "unforeseen";
    Events events = new Events();
    AtomicInteger failures = new AtomicInteger();
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      try (ElectorSet set = ElectorSet.builder(client, "fleet").ttl(Duration.ofSeconds(5)).listener(events).start()) {
        ElectorSet.Anchor anchor = set.anchorHook;
        set.anchorHook = (j, token, sent) -> {
          if (failures.compareAndSet(0, 1)) {
            throw new IllegalStateException("injected");
          }
          return anchor.at(j, token, sent);
        };
        set.campaign(job);
        ServerProcess.waitUntil(PATIENCE, "the job led", () -> set.isLeader(job));
        assertEquals(1, failures.get(), "the failure was injected");
        assertEquals(1, set.token(job).getAsLong());
        assertTrue(set.error(job).isEmpty(), () -> set.error(job).toString());
        assertEquals(set.holder(), client.getLease(job).holder());
      }
    } finally {
      System.setErr(err);
    }
    String log;
    synchronized (logged) {
      log = logged.toString(StandardCharsets.UTF_8);
    }
    assertTrue(log.lines().anyMatch(l -> l.contains(" ERROR ") && l.contains(job) && l.contains("campaigning again")),
        "an ERROR log says the job is campaigned for again");
    assertTrue(log.contains("injected"), "the log has the failure");
    assertEquals(List.of(1L), events.of("elected", job).stream().map(Events.Event::token).toList());
    assertEquals(List.of(1L), events.of("lost", job).stream().map(Events.Event::token).toList());
  }

  @Test
  void largeBatchesAreSplitIntoMessagesOfAtMost1000() {
    List<dev.leasehold.v1.KeepAliveRenewal> all = new ArrayList<>();
    for (int i = 0; i < 2500; i++) {
      all.add(dev.leasehold.v1.KeepAliveRenewal.newBuilder().setJob("j" + i).setHolder("h@1").setToken(1).build());
    }
    List<Integer> sizes = KeepAliveStream.split(all).stream().map(List::size).toList();
    assertEquals(2500, sizes.stream().mapToInt(Integer::intValue).sum());
    assertTrue(sizes.stream().allMatch(s -> s <= 1000), sizes.toString());
    List<dev.leasehold.v1.KeepAliveRenewal> big = new ArrayList<>();
    for (int i = 0; i < 400; i++) {
      big.add(dev.leasehold.v1.KeepAliveRenewal.newBuilder().setJob("j".repeat(250)).setHolder("h@1").setToken(1).build());
    }
    for (List<dev.leasehold.v1.KeepAliveRenewal> m : KeepAliveStream.split(big)) {
      assertTrue(m.stream().mapToInt(r -> r.getSerializedSize() + 4).sum() <= KeepAliveStream.MAX_MESSAGE_BYTES);
    }
  }
}
