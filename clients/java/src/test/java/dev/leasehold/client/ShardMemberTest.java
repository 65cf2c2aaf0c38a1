package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CancellationException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link ShardMember} and {@link Client#getGroup} against a real server:
 * two members share a group's shards, a handover cancels the old owner's
 * work before the new owner is assigned and fences its old token; a leave
 * hands every shard over; another count is refused naming {@code shards};
 * a revoke never acknowledged moves at its timeout and is told lost; a
 * manual release hands over at once; heartbeats keep the shards; a broken
 * stream reports every shard lost and joins again as the same member.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class ShardMemberTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  /** Renewals every second: no stall of a loaded machine loses a holding. */
  static final Duration TTL = Duration.ofSeconds(3);

  /** What a member's listener heard, with when. */
  static class Events implements ShardListener {
    record Event(String what, Shard shard, long at) {}

    final List<Event> events = new ArrayList<>();
    final List<LeaseholdException> errors = new ArrayList<>();
    volatile long errorAt;

    @Override
    public synchronized void onAssigned(Shard shard) {
      events.add(new Event("assigned", shard, System.nanoTime()));
    }

    @Override
    public synchronized void onRevoked(Shard shard) {
      events.add(new Event("revoked", shard, System.nanoTime()));
    }

    @Override
    public synchronized void onLost(Shard shard) {
      events.add(new Event("lost", shard, System.nanoTime()));
    }

    @Override
    public synchronized void onError(LeaseholdException error) {
      errors.add(error);
      errorAt = System.nanoTime();
    }

    synchronized List<Event> of(String what) {
      return events.stream().filter(e -> e.what.equals(what)).toList();
    }

    synchronized List<Event> of(String what, int shard) {
      return events.stream().filter(e -> e.what.equals(what) && e.shard.shard() == shard).toList();
    }

    /** The shards assigned and not lost or revoked since, as the events tell. */
    synchronized Set<Integer> held() {
      Set<Integer> out = new TreeSet<>();
      for (Event e : events) {
        if (e.what.equals("assigned")) {
          out.add(e.shard.shard());
        } else {
          out.remove(e.shard.shard());
        }
      }
      return out;
    }
  }

  static ShardGroup group(Client client, String group) {
    return client.getGroup(group);
  }

  /** Whether the group shows exactly these members, each with {@code each} shards. */
  static boolean balanced(Client client, String group, int each, ShardMember... members) {
    ShardGroup g = group(client, group);
    if (g.members().size() != members.length) {
      return false;
    }
    for (ShardMember m : members) {
      if (g.member(m.member()).map(x -> x.shards().size() != each).orElse(true) || m.owned().size() != each) {
        return false;
      }
    }
    return true;
  }

  /** Sleeps {@code ms}, interrupts or not (a clean-up that takes a while); keeps no interrupt. */
  static void sleepThrough(long ms) {
    long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
    while (true) {
      long left = until - System.nanoTime();
      if (left <= 0) {
        return;
      }
      try {
        TimeUnit.NANOSECONDS.sleep(left);
      } catch (InterruptedException e) {
        // the cancel's interrupt: the clean-up goes on
      }
    }
  }

  /**
   * (a) A owns all 4 shards (token 1 each); B joins and each owns 2. Each
   * moved shard's work on A was cancelled and had ended (its clean-up, a
   * last fenced write, landed with A's token) before B was assigned the
   * shard with token 2; A's old token on it is then fenced, B's writes.
   * The group view shows 2 members with 2 shards each.
   */
  @Test
  void twoMembersShareFourShardsAndAHandoverCancelsTheWorkBeforeTheNewOwnerIsAssigned() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Events aEvents = new Events();
      Map<Integer, Long> aEnded = new ConcurrentHashMap<>(); // shard -> when A's work for it ended
      Map<Integer, String> aLastWrite = new ConcurrentHashMap<>(); // shard -> how A's clean-up write went
      Set<Integer> aStarted = ConcurrentHashMap.newKeySet();
      ShardWork aWork = (shard, cancelled) -> {
        aStarted.add(shard.shard());
        try {
          while (!cancelled.isCancelled()) {
            Thread.sleep(10_000);
          }
        } catch (InterruptedException e) {
          // cancelled
        }
        // The clean-up takes a while, then checkpoints with our token: the
        // shard is still ours until the ack, so the write must land. An ack
        // sent before the work ended lets B in meanwhile: fenced.
        sleepThrough(700);
        String outcome;
        while (true) {
          Thread.interrupted();
          try {
            client.checkedWrite(shard.job(), shard.token(), "checkpoint", "a");
            outcome = "ok";
            break;
          } catch (FencedException e) {
            outcome = "fenced";
            break;
          } catch (CancellationException e) {
            // a late interrupt of the cancel: write again
          }
        }
        aLastWrite.put(shard.shard(), outcome);
        aEnded.put(shard.shard(), System.nanoTime());
      };
      try (ShardMember a = ShardMember.builder(client, "g", "a", 4).ttl(TTL).listener(aEvents).work(aWork).join()) {
        assertTrue(a.member().startsWith("a@"), a.member());
        assertEquals(4, a.shards());
        ServerProcess.waitUntil(PATIENCE, "A assigned all 4", () -> aEvents.of("assigned").size() == 4);
        for (int k = 0; k < 4; k++) {
          List<Events.Event> got = aEvents.of("assigned", k);
          assertEquals(1, got.size(), "shard " + k + " assigned once");
          assertEquals(1, got.get(0).shard.token(), "shard " + k + " token 1");
          assertEquals("g/" + k, got.get(0).shard.job());
        }
        ServerProcess.waitUntil(PATIENCE, "A's work running on all 4", () -> aStarted.size() == 4);
        assertEquals(4, a.owned().size());

        // B: on each assignment, note whether A's work for that shard had ended.
        Map<Integer, Boolean> aEndedFirst = new ConcurrentHashMap<>();
        Events bEvents = new Events() {
          @Override
          public synchronized void onAssigned(Shard shard) {
            aEndedFirst.put(shard.shard(), aEnded.containsKey(shard.shard()));
            super.onAssigned(shard);
          }
        };
        try (ShardMember b = ShardMember.builder(client, "g", "b", 4).ttl(TTL).listener(bEvents).join()) {
          assertNotEquals(a.member(), b.member());
          // The server's view can show B as the owner a moment before B's
          // listener hears of it: wait for both.
          ServerProcess.waitUntil(PATIENCE, "2 shards each, and B told of its 2",
              () -> balanced(client, "g", 2, a, b) && bEvents.of("assigned").size() == 2);
          List<Events.Event> moved = bEvents.of("assigned");
          assertEquals(2, moved.size(), "B assigned 2: " + moved);
          for (Events.Event e : moved) {
            int k = e.shard.shard();
            assertEquals(2, e.shard.token(), "a moved shard has the next token");
            assertEquals(1, aEvents.of("revoked", k).size(), "A was revoked shard " + k);
            assertTrue(aEndedFirst.get(k), "A's work for shard " + k + " had ended before B was assigned it");
            assertTrue(aEnded.get(k) - e.at < 0, "A's work for shard " + k + " ended before B's assignment");
            assertEquals("ok", aLastWrite.get(k), "A's clean-up write on shard " + k + " landed: the ack came after it");
            assertFalse(a.owned().containsKey(k));
            // A's old token is fenced; B's writes.
            FencedException f = assertThrows(FencedException.class,
                () -> client.checkedWrite(e.shard.job(), 1, "status", "from a"));
            assertEquals(2, f.currentToken().getAsLong());
            assertTrue(client.checkedWrite(e.shard.job(), e.shard.token(), "status", "from b") > 0);
          }
          assertTrue(aEvents.of("lost").isEmpty(), "a handover, not a loss: " + aEvents.of("lost"));
          // A's work goes on for the 2 shards it kept.
          Set<Integer> kept = a.owned().keySet();
          assertEquals(2, kept.size());
          for (int k : kept) {
            assertFalse(aEnded.containsKey(k), "A's work for kept shard " + k + " still runs");
            assertEquals(1, a.owned().get(k).token());
          }

          ShardGroup g = client.getGroup("g");
          assertEquals("g", g.group());
          assertEquals(4, g.shards());
          assertEquals(2, g.members().size());
          assertEquals(List.copyOf(kept), g.member(a.member()).orElseThrow().shards());
          assertEquals(moved.stream().map(e -> e.shard.shard()).sorted().toList(),
              g.member(b.member()).orElseThrow().shards());
          assertEquals(4, g.owners().size());
          for (ShardGroup.Owner o : g.owners()) {
            assertEquals("g/" + o.shard(), o.job());
            assertEquals(kept.contains(o.shard()) ? a.member() : b.member(), o.member());
            assertEquals(kept.contains(o.shard()) ? 1 : 2, o.token());
          }
          // And as a future.
          assertEquals(g, client.getGroupAsync("g").get(30, TimeUnit.SECONDS));
        }
      }
    }
  }

  /**
   * (b) A and B share 4 shards; A leaves (close): its work stops and it
   * hears each of its shards lost, and B is assigned them at once with
   * the next tokens, owning all 4.
   */
  @Test
  void aMemberThatLeavesHandsItsShardsToTheOtherWithTheNextTokens() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Events aEvents = new Events();
      Events bEvents = new Events();
      Set<Integer> aRunning = ConcurrentHashMap.newKeySet();
      ShardWork aWork = (shard, cancelled) -> {
        aRunning.add(shard.shard());
        try {
          cancelled.await();
        } finally {
          aRunning.remove(shard.shard());
        }
      };
      ShardMember a = ShardMember.builder(client, "g", "a", 4).ttl(TTL).listener(aEvents).work(aWork).join();
      try (ShardMember b = ShardMember.builder(client, "g", "b", 4).ttl(TTL).listener(bEvents).join()) {
        try {
          ServerProcess.waitUntil(PATIENCE, "2 shards each", () -> balanced(client, "g", 2, a, b));
          Map<Integer, Shard> aHad = a.owned();
          ServerProcess.waitUntil(PATIENCE, "A's work running on its 2", () -> aRunning.equals(aHad.keySet()));
          a.close();
          assertTrue(aRunning.isEmpty(), "close() stopped A's work: " + aRunning);
          assertEquals(aHad.keySet(), new TreeSet<>(aEvents.of("lost").stream().map(e -> e.shard.shard()).toList()),
              "A heard each of its shards lost");
          assertTrue(a.done().isDone() && !a.done().isCompletedExceptionally());
          ServerProcess.waitUntil(PATIENCE, "B owns all 4", () -> b.owned().size() == 4);
          for (Map.Entry<Integer, Shard> e : aHad.entrySet()) {
            Shard now = b.owned().get(e.getKey());
            assertEquals(e.getValue().token() + 1, now.token(), "shard " + e.getKey() + " went to B with the next token");
          }
          assertEquals(Set.of(0, 1, 2, 3), bEvents.held());
          ShardGroup g = client.getGroup("g");
          assertEquals(1, g.members().size());
          assertEquals(List.of(0, 1, 2, 3), g.member(b.member()).orElseThrow().shards());
          assertTrue(g.member(a.member()).isEmpty(), "A left");
        } finally {
          a.close();
        }
      }
    }
  }

  /**
   * (c) Joining a group of 4 with 5 shards is refused by the server with
   * the typed invalid-argument error naming {@code shards}; 0 and 1025
   * shards, and an empty group, are refused before anything is sent.
   * Nothing changed: the group still has 4 shards and one member. A group
   * never joined has 0 shards.
   */
  @Test
  void aJoinNamingAnotherCountOrZeroShardsIsInvalidArgumentNamingShards() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target);
        ShardMember a = ShardMember.builder(client, "g", "a", 4).ttl(TTL).work((s, c) -> c.await()).join()) {
      InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
          () -> ShardMember.builder(client, "g", "b", 5).ttl(TTL).work((s, c) -> c.await()).join());
      assertEquals("shards", e.field());
      assertTrue(e.getMessage().contains("4"), "the message says the group's count: " + e.getMessage());
      for (int n : new int[] {0, 1025, -1}) {
        InvalidArgumentException local = assertThrows(InvalidArgumentException.class,
            () -> ShardMember.builder(client, "g", "b", n).join());
        assertEquals("shards", local.field(), "shards=" + n);
      }
      assertEquals("group", assertThrows(InvalidArgumentException.class,
          () -> ShardMember.builder(client, "", "b", 4).join()).field());
      ServerProcess.waitUntil(PATIENCE, "A owns all 4", () -> a.owned().size() == 4);
      ShardGroup g = client.getGroup("g");
      assertEquals(4, g.shards());
      assertEquals(1, g.members().size());
      assertEquals(a.member(), g.members().get(0).member());

      ShardGroup never = client.getGroup("never-joined");
      assertEquals(0, never.shards());
      assertTrue(never.members().isEmpty() && never.owners().isEmpty());
    }
  }

  /**
   * (d) A member that never acknowledges a revoke (manual acks, no
   * release): after its revoke timeout (1 s) the shard moves to B anyway
   * with the next token, and A is told it lost it.
   */
  @Test
  void aRevokeNeverAcknowledgedMovesAtItsTimeoutAndTheMemberIsToldLost() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Events aEvents = new Events();
      Events bEvents = new Events();
      try (ShardMember a = ShardMember.builder(client, "d", "a", 2).ttl(TTL).revokeTimeout(Duration.ofSeconds(1))
          .manualAck(true).listener(aEvents).join()) {
        ServerProcess.waitUntil(PATIENCE, "A owns both", () -> aEvents.held().size() == 2);
        try (ShardMember b = ShardMember.builder(client, "d", "b", 2).ttl(TTL).listener(bEvents).join()) {
          ServerProcess.waitUntil(PATIENCE, "A revoked one", () -> aEvents.of("revoked").size() == 1);
          Events.Event revoked = aEvents.of("revoked").get(0);
          int k = revoked.shard.shard();
          assertEquals(1, revoked.shard.token());
          ServerProcess.waitUntil(PATIENCE, "B assigned shard " + k, () -> bEvents.of("assigned", k).size() == 1);
          assertEquals(2, bEvents.of("assigned", k).get(0).shard.token());
          assertEquals(2, b.owned().get(k).token());
          ServerProcess.waitUntil(PATIENCE, "A told shard " + k + " lost", () -> aEvents.of("lost", k).size() == 1);
          Events.Event lost = aEvents.of("lost", k).get(0);
          assertEquals(1, lost.shard.token(), "lost names the token A owned it with");
          // Never before the deadline (a lower bound only: load may delay it).
          assertTrue(lost.at - revoked.at >= TimeUnit.MILLISECONDS.toNanos(900),
              "moved after the revoke timeout, not before: " + (lost.at - revoked.at) / 1_000_000 + " ms");
          assertFalse(a.owned().containsKey(k));
          assertEquals(1, a.owned().size(), "A keeps the other shard");
          assertThrows(FencedException.class, () -> client.checkedWrite("d/" + k, 1, "status", "late"));
          assertEquals(1, aEvents.of("lost").size(), "only that shard lost");
        }
      }
    }
  }

  /**
   * With manual acks, {@link ShardMember#release(int)} acknowledges a
   * revoke: the shard moves to B at once (long before the 30 s revoke
   * timeout), with the next token, and A hears no loss.
   */
  @Test
  void aManualReleaseHandsTheShardOverAtOnce() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Events aEvents = new Events();
      Events bEvents = new Events();
      try (ShardMember a = ShardMember.builder(client, "m", "a", 2).ttl(TTL).revokeTimeout(Duration.ofSeconds(30))
          .manualAck(true).listener(aEvents).join()) {
        ServerProcess.waitUntil(PATIENCE, "A owns both", () -> aEvents.held().size() == 2);
        try (ShardMember b = ShardMember.builder(client, "m", "b", 2).ttl(TTL).listener(bEvents).join()) {
          ServerProcess.waitUntil(PATIENCE, "A revoked one", () -> aEvents.of("revoked").size() == 1);
          int k = aEvents.of("revoked").get(0).shard.shard();
          // Not acknowledged yet: still A's, its token still writes.
          assertTrue(a.owned().containsKey(k));
          assertTrue(client.checkedWrite("m/" + k, 1, "status", "still a") > 0);
          long released = System.nanoTime();
          a.release(k);
          ServerProcess.waitUntil(PATIENCE, "B assigned shard " + k, () -> bEvents.of("assigned", k).size() == 1);
          assertTrue(System.nanoTime() - released < TimeUnit.SECONDS.toNanos(25), "moved by the release, not the timeout");
          assertEquals(2, bEvents.of("assigned", k).get(0).shard.token());
          assertEquals(2, b.owned().get(k).token());
          assertFalse(a.owned().containsKey(k));
          assertTrue(aEvents.of("lost").isEmpty(), "no loss: " + aEvents.of("lost"));
        }
      }
    }
  }

  /** The heartbeats (every ttl/3) keep a member's shards past several TTLs, with their tokens. */
  @Test
  void heartbeatsKeepTheShardsPastSeveralTtls() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Events events = new Events();
      try (ShardMember a = ShardMember.builder(client, "h", "a", 3).ttl(TTL).listener(events).join()) {
        ServerProcess.waitUntil(PATIENCE, "A owns all 3", () -> a.owned().size() == 3);
        long until = System.nanoTime() + TTL.multipliedBy(3).plusSeconds(1).toNanos();
        ServerProcess.waitUntil(PATIENCE, "three TTLs passed, nothing lost",
            () -> !events.of("lost").isEmpty() || System.nanoTime() - until > 0);
        assertTrue(events.of("lost").isEmpty(), "nothing lost: " + events.of("lost"));
        assertEquals(3, events.of("assigned").size());
        for (ShardGroup.Owner o : client.getGroup("h").owners()) {
          assertEquals(a.member(), o.member());
          assertEquals(1, o.token(), "the same holding, renewed");
          assertEquals(a.member(), client.getLease(o.job()).holder());
        }
      }
    }
  }

  /**
   * The server killed: the member reports every shard lost at once (its
   * work stopped), joins again under the same identity once the server is
   * back, and is assigned its shards again with the same tokens (the
   * holdings outlived the restart).
   */
  @Test
  void aBrokenStreamReportsEveryShardLostAndJoinsAgainAsTheSameMember() throws Exception {
    Duration ttl = Duration.ofSeconds(15); // the holdings outlive the restart, however slow
    ServerProcess server = new ServerProcess();
    ServerProcess again = null;
    try (Client client = Client.connect(server.target)) {
      Events events = new Events();
      Set<Integer> running = ConcurrentHashMap.newKeySet();
      ShardWork work = (shard, cancelled) -> {
        running.add(shard.shard());
        try {
          cancelled.await();
        } finally {
          running.remove(shard.shard());
        }
      };
      try (ShardMember a = ShardMember.builder(client, "r", "a", 2).ttl(ttl).listener(events).work(work).join()) {
        ServerProcess.waitUntil(PATIENCE, "A owns both, working", () -> running.size() == 2);
        String member = a.member();
        server.kill();
        ServerProcess.waitUntil(PATIENCE, "both lost", () -> events.of("lost").size() == 2);
        assertTrue(running.isEmpty(), "the work stopped: " + running);
        assertTrue(a.owned().isEmpty());
        again = server.restart();
        ServerProcess.waitUntil(PATIENCE, "both assigned again", () -> events.of("assigned").size() == 4 && running.size() == 2);
        assertEquals(member, a.member());
        for (int k = 0; k < 2; k++) {
          List<Events.Event> got = events.of("assigned", k);
          assertEquals(got.get(0).shard.token(), got.get(1).shard.token(), "shard " + k + ": the same holding");
        }
        ShardGroup g = client.getGroup("r");
        assertEquals(1, g.members().size());
        assertEquals(List.of(0, 1), g.member(member).orElseThrow().shards());
        assertTrue(events.errors.isEmpty(), "the membership goes on: " + events.errors);
        assertFalse(a.done().isDone());
      }
    } finally {
      if (again != null) {
        again.close();
      }
      server.close();
    }
  }

  /**
   * Another stream joining as the same member takes its place: the older
   * stream ends with LEASE_LOST, which ends its membership (not retried),
   * reported lost first and then as the typed error.
   */
  @Test
  void aMemberReplacedByAnotherStreamEndsWithTheTypedError() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Events events = new Events();
      try (ShardMember a = ShardMember.builder(client, "x", "a", 1).ttl(TTL).listener(events).join()) {
        ServerProcess.waitUntil(PATIENCE, "A owns the shard", () -> a.owned().size() == 1);
        // The same member joins on a stream of its own (the generated stub).
        io.grpc.stub.StreamObserver<dev.leasehold.v1.JoinRequest> other = dev.leasehold.v1.ShardsGrpc
            .newStub(client.channel()).join(new io.grpc.stub.StreamObserver<>() {
              @Override
              public void onNext(dev.leasehold.v1.JoinResponse r) {}

              @Override
              public void onError(Throwable t) {}

              @Override
              public void onCompleted() {}
            });
        other.onNext(dev.leasehold.v1.JoinRequest.newBuilder().setGroup("x").setMember(a.member()).setShards(1)
            .setTtl(Durations.toProto(TTL)).build());
        try {
          ServerProcess.waitUntil(PATIENCE, "A's membership ended", () -> a.done().isDone());
          assertTrue(a.error().orElseThrow() instanceof LeaseLostException, a.error().toString());
          assertEquals(1, events.of("lost").size(), "its shard reported lost");
          assertEquals(1, events.errors.size());
          assertTrue(events.errors.get(0) instanceof LeaseLostException);
          assertTrue(events.of("lost").get(0).at - events.errorAt < 0, "the loss was reported before the error");
        } finally {
          other.onCompleted();
        }
      }
    }
  }
}
