package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.leasehold.client.BindToStreamTest.Worker;
import java.nio.file.Files;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The conformance worker's lock, follow, fleet, shards, history and
 * delete-job commands, its --value flag with set-value, leader, waiters and follow's
 * value, and its --ca and --token flags, run as processes against a real
 * server (clients/conformance/README.md has the protocol).
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class WorkerCommandsTest {
  static final long PATIENCE_MS = ServerProcess.PATIENCE.toMillis();
  static final Duration TTL = Duration.ofSeconds(2);

  /** The line starting with {@code prefix}, which must come. */
  static String expect(Worker w, String prefix) throws InterruptedException {
    String line = w.await(prefix, PATIENCE_MS);
    assertNotNull(line, w.name + " printed no line starting with \"" + prefix + "\"");
    return line;
  }

  @Test
  void lockFollowFleetHistoryAndDeleteJob() throws Exception {
    try (ServerProcess server = ServerProcess.withArgs("--enable-chaos");
        Client client = Client.connect(server.target);
        Worker a = new Worker("A", server.target, "main-a", TTL);
        Worker b = new Worker("B", server.target, "main-b", TTL)) {
      a.holder();
      b.holder();

      // lock: A holds, B waits; chaos expires A's lease: A reports the loss,
      // B holds with token 2, A's write with its token is fenced.
      a.send("lock lk");
      String held = expect(a, "lock held lk token=1 holder=A@");
      String aHolder = held.substring(held.indexOf("holder=") + "holder=".length());
      assertEquals(aHolder, client.getLease("lk").holder());
      b.send("lock lk");
      server.waitWaiters(1);
      a.send("lock-write one");
      expect(a, "lock-write ok version=1");
      client.chaos().expire("lk");
      expect(a, "lock lost lk token=1");
      expect(b, "lock held lk token=2 holder=B@");
      a.send("lock-write two");
      expect(a, "lock-write fenced current=2");
      a.send("unlock");
      expect(a, "unlock done");
      b.send("lock-write three");
      expect(b, "lock-write ok version=2");
      a.send("history lk");
      expect(a, "history lk tokens=2,1");
      a.send("delete-job lk");
      expect(a, "delete-job in-use");
      b.send("unlock");
      expect(b, "unlock done");
      ServerProcess.waitUntil(ServerProcess.PATIENCE, "lk released", () -> !client.getLease("lk").isHeld());

      // follow: A's elector leads fj; B follows and hears A's grant, then
      // its own once A stops.
      a.send("follow fj");
      String fa = expect(a, "follow holder A@").substring("follow holder ".length());
      expect(a, "follow elected fj token=1");
      expect(a, "newleader fj holder=" + fa + " token=1");
      expect(a, "observe fj holder=" + fa + " token=1");
      b.send("follow fj");
      String fb = expect(b, "follow holder B@").substring("follow holder ".length());
      expect(b, "newleader fj holder=" + fa + " token=1");
      expect(b, "observe fj holder=" + fa + " token=1");
      server.waitWaiters(1);
      a.send("follow-stop");
      expect(a, "follow lost fj token=1");
      expect(a, "follow-stop done");
      expect(b, "follow elected fj token=2");
      expect(b, "newleader fj holder=" + fb + " token=2");
      expect(b, "observe fj holder=" + fb + " token=2");
      b.send("follow-stop");
      expect(b, "follow-stop done");

      // fleet: A leads three jobs; fleet-stop releases them all.
      a.send("fleet 3 fl-");
      String fleet = expect(a, "fleet holder A@").substring("fleet holder ".length());
      for (int i = 0; i < 3; i++) {
        expect(a, "fleet elected fl-");
      }
      for (int i = 0; i < 3; i++) {
        assertEquals(fleet, client.getLease("fl-" + i).holder());
      }
      a.send("fleet-stop");
      for (int i = 0; i < 3; i++) {
        expect(a, "fleet lost fl-");
      }
      expect(a, "fleet-stop done");
      for (int i = 0; i < 3; i++) {
        assertTrue(!client.getLease("fl-" + i).isHeld(), "fl-" + i + " released");
      }

      // delete-job last (a deletion raises the tokens of later jobs).
      a.send("delete-job lk");
      expect(a, "delete-job deleted");
      a.send("delete-job lk");
      expect(a, "delete-job absent");
      a.send("history never-granted");
      expect(a, "history never-granted tokens=");

      a.send("quit");
      b.send("quit");
      expect(a, "bye");
      expect(b, "bye");
    }
  }

  /**
   * A leads with --value; B (waiting) reads it with {@code leader}; B's
   * {@code follow} hears A's grant with its value (newleader and observe
   * lines), then A's {@code set-value} as an observe line of the
   * VALUE_CHANGED event, which B's {@code leader} reads too; {@code waiters}
   * lists both waiting electors of B; B's follow elector publishes its own
   * value. A value-less leader prints {@code value=-}.
   */
  @Test
  void valueSetValueLeaderWaitersAndFollowWithAValue() throws Exception {
    // TTL 10 s: a campaign's Acquire waits 30 s before it is sent again,
    // so the line holds still while the test reads it; renewals (and so a
    // value set) every 3.3 s.
    Duration ttl = Duration.ofSeconds(10);
    try (ServerProcess server = new ServerProcess();
        Client client = Client.connect(server.target);
        Worker a = new Worker("A", server.target, "vj", ttl, "--value", "10.0.0.1:8080")) {
      String ha = a.holder();
      expect(a, "elected token=1");
      runWithB(server, client, a, ha, ttl);
    }
  }

  /** The rest of {@link #valueSetValueLeaderWaitersAndFollowWithAValue}, B started once A leads. */
  private static void runWithB(ServerProcess server, Client client, Worker a, String ha, Duration ttl) throws Exception {
    try (Worker b = new Worker("B", server.target, "vj", ttl)) {
      String hb = b.holder();
      server.waitWaiters(1);
      b.send("leader");
      expect(b, "leader holder=" + ha + " token=1 value=10.0.0.1:8080");

      b.send("follow vj 10.0.0.2:8080");
      String fb = expect(b, "follow holder B@").substring("follow holder ".length());
      expect(b, "newleader vj holder=" + ha + " token=1 value=10.0.0.1:8080");
      expect(b, "observe vj holder=" + ha + " token=1 value=10.0.0.1:8080");
      server.waitWaiters(2);
      a.send("waiters vj");
      String line = expect(a, "waiters ");
      assertTrue(line.equals("waiters n=2 " + hb + " " + fb) || line.equals("waiters n=2 " + fb + " " + hb), line);
      a.send("waiters nobody-waits");
      expect(a, "waiters n=0");

      a.send("set-value 10.0.0.1:9090");
      expect(a, "set-value done");
      expect(b, "observe vj holder=" + ha + " token=1 value=10.0.0.1:9090"); // VALUE_CHANGED
      assertEquals("10.0.0.1:9090", client.getLease("vj").valueUtf8());
      b.send("leader");
      expect(b, "leader holder=" + ha + " token=1 value=10.0.0.1:9090");

      // A quits: the first in line leads with token 2; with B's follow
      // elector stopped first, that is B's own elector, which has no value.
      b.send("follow-stop");
      expect(b, "follow-stop done");
      a.send("quit");
      expect(a, "bye");
      expect(b, "elected token=2");
      b.send("leader");
      expect(b, "leader holder=" + hb + " token=2 value=-");
      b.send("quit");
      expect(b, "bye");
    }
  }

  /**
   * The shards commands: A joins g (4 shards) and owns all 4 with token 1;
   * B joins: A prints two revokes, B is assigned those shards with token 2;
   * A's write on a moved shard is fenced, on a kept one it lands, B's on a
   * moved one lands, B never owned A's; a third worker naming 5 shards is
   * refused naming {@code shards}; A's shards-stop hands B the rest.
   */
  @Test
  void shardsShardsWriteAndShardsStop() throws Exception {
    Duration ttl = Duration.ofSeconds(3);
    try (ServerProcess server = new ServerProcess();
        Client client = Client.connect(server.target);
        Worker a = new Worker("A", server.target, "sa", ttl);
        Worker b = new Worker("B", server.target, "sb", ttl);
        Worker c = new Worker("C", server.target, "sc", ttl)) {
      a.holder();
      b.holder();
      c.holder();
      a.send("shards g 4");
      String am = expect(a, "shards member A@").substring("shards member ".length());
      for (int i = 0; i < 4; i++) {
        expect(a, "shards assigned ");
      }
      b.send("shards g 4");
      String bm = expect(b, "shards member B@").substring("shards member ".length());
      java.util.List<Integer> moved = new java.util.ArrayList<>();
      for (int i = 0; i < 2; i++) {
        String line = expect(b, "shards assigned ");
        assertTrue(line.endsWith(" token=2"), line);
        moved.add(Integer.parseInt(line.split(" ")[2]));
      }
      for (int k : moved) {
        expect(a, "shards revoked " + k);
      }
      int kept = java.util.stream.IntStream.range(0, 4).filter(k -> !moved.contains(k)).findFirst().getAsInt();
      a.send("shards-write " + moved.get(0) + " from-a");
      expect(a, "shards-write fenced current=2");
      a.send("shards-write " + kept + " from-a");
      expect(a, "shards-write ok version=");
      b.send("shards-write " + moved.get(0) + " from-b");
      expect(b, "shards-write ok version=");
      b.send("shards-write " + kept + " from-b");
      expect(b, "shards-write error never-owned");
      ShardGroup g = client.getGroup("g");
      assertEquals(2, g.member(am).orElseThrow().shards().size());
      assertEquals(moved.stream().sorted().toList(), g.member(bm).orElseThrow().shards());

      c.send("shards g 5");
      expect(c, "shards invalid field=shards");
      c.send("shards g 0");
      expect(c, "shards invalid field=shards");

      a.send("shards-stop");
      expect(a, "shards-stop done");
      for (int i = 0; i < 2; i++) {
        String line = expect(b, "shards assigned ");
        assertTrue(line.endsWith(" token=2"), line);
      }
      assertEquals(java.util.List.of(0, 1, 2, 3), client.getGroup("g").member(bm).orElseThrow().shards());
      a.send("quit");
      b.send("quit");
      c.send("quit");
      expect(a, "bye");
      expect(b, "bye");
      expect(c, "bye");
      assertTrue(client.getGroup("g").members().isEmpty(), "B's quit left the group");
    }
  }

  @Test
  void caAndTokenFlagsReachATlsServerWithAPolicy() throws Exception {
    try (ServerProcess server = ServerProcess.secure()) {
      String ca = server.pki.resolve("ca.pem").toString();
      String alice = Files.readString(server.pki.resolve("alice.token")).trim();
      try (Worker w = new Worker("T", server.target, "tls-job", TTL, "--ca", ca, "--token", alice);
          Worker none = new Worker("N", server.target, "tls-job-2", TTL, "--ca", ca)) {
        w.holder();
        expect(w, "elected token=1");
        w.send("lock tls-lock");
        expect(w, "lock held tls-lock token=1");
        w.send("history tls-job");
        expect(w, "history tls-job tokens=1");
        none.holder();
        none.send("history tls-job");
        expect(none, "history error UnauthenticatedException");
        w.send("quit");
        none.send("quit");
        expect(w, "bye");
        expect(none, "bye");
      }
    }
  }
}
