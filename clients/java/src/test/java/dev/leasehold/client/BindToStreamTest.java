package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.leasehold.v1.Tenure;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code bindToStream}: a grant bound to its connection is released at once
 * when the client's end of that connection closes (cut, the client closed,
 * its process killed), well before its TTL, and the history records the
 * end as CONNECTION_CLOSED. Each test has its own server: it counts its queued
 * Acquires. Against the real server.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class BindToStreamTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  /** Long enough that a release at once is told from an expiry by a third of it, longer than a stall. */
  static final Duration TTL = Duration.ofSeconds(30);

  /**
   * Leases acquired with bindToStream through a proxy whose connections
   * the test cuts (a FIN to the server, as the kernel of a dead process
   * sends): they are freed at once, and the first waiter is granted the
   * next token; a lease acquired there without it is kept.
   */
  @Test
  void aBoundLeaseIsReleasedWhenItsConnectionIsCut() throws Exception {
    try (ServerProcess server = new ServerProcess();
         Client client = Client.connect(server.target);
         TcpProxy proxy = new TcpProxy(server.target);
         Client own = Client.connect(proxy.target())) {
      Acquired free = own.acquire("free", "bound", TTL, Duration.ZERO, true);
      assertTrue(free.acquired());
      assertEquals(1, free.lease().token());
      assertEquals(1, own.acquireAsync("awaited", "bound", TTL, Duration.ZERO, true)
          .get(PATIENCE.toSeconds(), TimeUnit.SECONDS).lease().token());
      assertEquals(1, own.acquire("unbound", "plain", TTL).lease().token());
      CompletableFuture<Acquired> waiter = client.acquireAsync("awaited", "next", TTL, PATIENCE);
      server.waitWaiters(1);
      assertEquals("bound", client.getLease("free").holder(), "bound, and held while its connection lives");

      long cut = System.nanoTime();
      proxy.cut();
      Acquired granted = waiter.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
      assertTrue(granted.acquired());
      assertEquals(2, granted.lease().token());
      ServerProcess.waitUntil(PATIENCE, "the bound lease freed", () -> client.getLease("free").holder() == null);
      long took = System.nanoTime() - cut;
      assertTrue(took < TTL.toNanos() / 3, "freed " + took / 1e6 + " ms after the cut: by expiry");
      assertEquals(1, client.getLease("free").token());
      assertEquals(Tenure.End.END_CONNECTION_CLOSED, server.tenureEnd("free", 1));
      assertEquals(Tenure.End.END_CONNECTION_CLOSED, server.tenureEnd("awaited", 1));
      assertEquals("plain", client.getLease("unbound").holder(), "a lease acquired without bindToStream outlives its connection");
      assertEquals(Tenure.End.END_UNSPECIFIED, server.tenureEnd("unbound", 1));

      // The client connects again (through the proxy) for its next call;
      // its stale token is fenced.
      FencedException e = assertThrows(FencedException.class, () -> own.checkedWrite("awaited", 1, "k", "stale"));
      assertEquals(2, e.currentToken().getAsLong());
      client.release("awaited", "next", 2);
    }
  }

  /** A lease acquired with bindToStream on a client of its own, then that client closed: freed at once. */
  @Test
  void aBoundLeaseIsReleasedWhenItsClientIsClosed() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Client own = Client.connect(server.target);
      try {
        assertEquals(1, own.acquire("closed", "bound", TTL, Duration.ZERO, true).lease().token());
        assertEquals("bound", client.getLease("closed").holder());
        long closed = System.nanoTime();
        own.close();
        ServerProcess.waitUntil(PATIENCE, "the bound lease freed", () -> client.getLease("closed").holder() == null);
        long took = System.nanoTime() - closed;
        assertTrue(took < TTL.toNanos() / 3, "freed " + took / 1e6 + " ms after the close: by expiry");
        assertEquals(Tenure.End.END_CONNECTION_CLOSED, server.tenureEnd("closed", 1));
      } finally {
        own.close();
      }
    }
  }

  /**
   * The trade: a bound elector whose connection is cut while it lives loses
   * its lease at once; the waiter leads with the next token, the old
   * leader's writes are fenced, and it steps down at its next renewal and
   * campaigns again.
   */
  @Test
  void aBoundElectorWhoseConnectionIsCutLosesItsLeaseAtOnce() throws Exception {
    try (ServerProcess server = new ServerProcess();
         Client client = Client.connect(server.target);
         TcpProxy proxy = new TcpProxy(server.target);
         Client viaProxy = Client.connect(proxy.target())) {
      ElectorTest.Recorder ra = new ElectorTest.Recorder();
      ElectorTest.Recorder rb = new ElectorTest.Recorder();
      try (Elector a = ra.attach(Elector.builder(viaProxy, "cut", "a").ttl(TTL).bindToStream(true)).start()) {
        assertEquals(1, a.awaitElected(PATIENCE).getAsLong());
        try (Elector b = rb.attach(Elector.builder(client, "cut", "b").ttl(TTL).bindToStream(true)).start()) {
          server.waitWaiters(1);
          long cut = System.nanoTime();
          proxy.cut();
          assertEquals(2, b.awaitElected(PATIENCE).getAsLong());
          long took = System.nanoTime() - cut;
          assertTrue(took < TTL.toNanos() / 3, "elected " + took / 1e6 + " ms after the cut: by expiry");
          assertEquals(Tenure.End.END_CONNECTION_CLOSED, server.tenureEnd("cut", 1));
          assertThrows(FencedException.class, () -> viaProxy.checkedWrite("cut", 1, "k", "stale"));
          // Its next renewal (TTL/3 after the last) is refused: it steps
          // down, and queues behind b.
          ServerProcess.waitUntil(PATIENCE, "the old leader's step-down", () -> ra.get().contains("lost 1"));
          assertFalse(a.isLeader());
          server.waitWaiters(1);
          assertEquals(List.of("elected 1", "lost 1"), ra.get());
        }
      }
    }
  }

  /**
   * An elector built with bindToStream works like any: it leads, keeps
   * leading across its renewals, and close() hands over at once by its
   * release; so does the next one, bound too.
   */
  @Test
  void anElectorBoundToItsStreamLeadsRenewsAndHandsOver() throws Exception {
    // Renewals every 3 s, a lease of 9 s: a stall between two does not end it.
    Duration ttl = Duration.ofSeconds(9);
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      ElectorTest.Recorder ra = new ElectorTest.Recorder();
      ElectorTest.Recorder rb = new ElectorTest.Recorder();
      Elector a = ra.attach(Elector.builder(client, "bound", "a").ttl(ttl).bindToStream(true)).start();
      try (Elector b = rb.attach(Elector.builder(client, "bound", "b").ttl(ttl).bindToStream(true)).build()) {
        try {
          assertEquals(1, a.awaitElected(PATIENCE).getAsLong());
          b.start();
          server.waitWaiters(1);
          double renewals = server.metric("leasehold_renewals_total");
          server.waitRenewals(renewals + 3, () -> assertEquals(1, a.token().orElse(-1), "lost the lead: " + ra.get()));
          assertEquals(a.holder(), client.getLease("bound").holder());
          a.close();
          assertEquals(2, b.awaitElected(PATIENCE).getAsLong());
          assertEquals(List.of("elected 1", "lost 1"), ra.get());
          assertEquals(Tenure.End.END_RELEASED, server.tenureEnd("bound", 1));
          assertEquals(0, server.metric("leasehold_expiries_total"), "a hand-over by expiry");
        } finally {
          a.close();
        }
        b.close();
        assertEquals(List.of("elected 2", "lost 2"), rb.get());
        assertNull(client.getLease("bound").holder());
      }
    }
  }

  /**
   * The conformance worker with {@code --bind}, killed (SIGKILL: its kernel
   * closes the connection): the other worker is elected at once, well
   * before the TTL, and the history says CONNECTION_CLOSED. On the way, the
   * worker's {@code transfer} and {@code transfer-to} commands.
   */
  @Test
  void aBoundWorkerKilledHandsOverAtOnceAndTransfersOnCommand() throws Exception {
    String job = "workers";
    try (ServerProcess server = new ServerProcess();
         Client client = Client.connect(server.target);
         Worker w1 = new Worker("w1", server.target, job, "--bind");
         Worker w2 = new Worker("w2", server.target, job, "--bind")) {
      String h1 = w1.holder();
      String h2 = w2.holder();
      Worker leader = Worker.first("elected ", w1, w2);
      Worker other = leader == w1 ? w2 : w1;
      assertEquals("elected token=1", leader.await("elected ", PATIENCE.toMillis()));
      server.waitWaiters(1);

      // transfer: the other leads with token 2, the leader reports the loss.
      leader.send("transfer");
      assertEquals("transfer ok token=2", leader.await("transfer ", PATIENCE.toMillis()));
      assertEquals("lost token=1", leader.await("lost ", PATIENCE.toMillis()));
      assertEquals("elected token=2", other.await("elected ", PATIENCE.toMillis()));
      assertEquals(Tenure.End.END_TRANSFERRED, server.tenureEnd(job, 1));
      server.waitWaiters(1); // the old leader, queued again
      leader.send("transfer");
      assertEquals("transfer not-leader", leader.await("transfer ", PATIENCE.toMillis()));
      other.send("transfer-to nobody");
      assertEquals("transfer no-successor", other.await("transfer ", PATIENCE.toMillis()));
      String leaderHolder = leader == w1 ? h1 : h2;
      other.send("transfer-to " + leaderHolder);
      assertEquals("transfer ok token=3", other.await("transfer ", PATIENCE.toMillis()));
      assertEquals("lost token=2", other.await("lost ", PATIENCE.toMillis()));
      assertEquals("elected token=3", leader.await("elected ", PATIENCE.toMillis()));
      server.waitWaiters(1); // the other, queued again

      // SIGKILL to the bound leader: the other is elected at once.
      long killed = System.nanoTime();
      leader.kill();
      assertEquals("elected token=4", other.await("elected ", PATIENCE.toMillis()));
      long took = System.nanoTime() - killed;
      assertTrue(took < Worker.TTL.toNanos() / 3, "elected " + took / 1e6 + " ms after the kill: by expiry");
      assertEquals(Tenure.End.END_CONNECTION_CLOSED, server.tenureEnd(job, 3));
      assertEquals(0, server.metric("leasehold_expiries_total"), "a hand-over by expiry");

      // A lease taken behind the leader's back: its transfer is lost.
      client.release(job, other == w1 ? h1 : h2, 4);
      other.send("transfer");
      assertEquals("transfer lost", other.await("transfer ", PATIENCE.toMillis()));
      assertEquals("lost token=4", other.await("lost ", PATIENCE.toMillis()));
      other.send("quit");
      assertNotNull(other.await("bye", PATIENCE.toMillis()));
    }
  }

  /** A conformance worker process (dev.leasehold.examples.ConformanceWorker) and the lines it prints. */
  static final class Worker implements AutoCloseable {
    static final Duration TTL = Duration.ofSeconds(30);

    final String name;
    final Process process;
    private final Writer stdin;
    private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    /** The lines printed so far, and whether {@link #await} took each. */
    private final List<String> seen = new ArrayList<>();
    private final List<Boolean> taken = new ArrayList<>();

    Worker(String name, String target, String job, String... flags) throws IOException {
      this(name, target, job, TTL, flags);
    }

    /** A worker whose elector's TTL is {@code ttl}. */
    Worker(String name, String target, String job, Duration ttl, String... flags) throws IOException {
      this.name = name;
      // Surefire runs the tests from a manifest-only jar: the real class path
      // is in this property.
      String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
      List<String> cmd = new ArrayList<>(List.of(
          Paths.get(System.getProperty("java.home"), "bin", "java").toString(),
          "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", cp.replace(' ', File.pathSeparatorChar),
          "dev.leasehold.examples.ConformanceWorker",
          "--server", target, "--job", job, "--name", name, "--ttl-ms", Long.toString(ttl.toMillis())));
      cmd.addAll(List.of(flags));
      process = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
      stdin = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
      Thread reader = new Thread(() -> {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
          String line;
          while ((line = r.readLine()) != null) {
            System.out.println(name + ": " + line);
            lines.add(line);
          }
        } catch (IOException e) {
          // ended
        }
      }, name + "-stdout");
      reader.setDaemon(true);
      reader.start();
    }

    /** Its holder id, from its first line. */
    String holder() throws InterruptedException {
      String line = await("holder ", PATIENCE.toMillis());
      assertNotNull(line, name + " printed no holder line");
      return line.substring("holder ".length());
    }

    void send(String command) throws IOException {
      stdin.write(command + "\n");
      stdin.flush();
    }

    /**
     * The first line not taken yet that starts with {@code prefix}, waiting
     * up to {@code ms} for it, and takes it; null if none came. Lines of two
     * threads of the worker (a command's answer, an elector's report) may
     * come in either order: the lines skipped stay for later calls.
     */
    String await(String prefix, long ms) throws InterruptedException {
      long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
      while (true) {
        int i = pending(prefix);
        if (i >= 0) {
          taken.set(i, true);
          return seen.get(i);
        }
        long left = end - System.nanoTime();
        String line = left > 0 ? lines.poll(left, TimeUnit.NANOSECONDS) : null;
        if (line == null) {
          return null;
        }
        seen.add(line);
        taken.add(false);
      }
    }

    /** The index of the first line not taken that starts with {@code prefix}, or -1. */
    private int pending(String prefix) {
      List<String> more = new ArrayList<>();
      lines.drainTo(more);
      for (String line : more) {
        seen.add(line);
        taken.add(false);
      }
      for (int i = 0; i < seen.size(); i++) {
        if (!taken.get(i) && seen.get(i).startsWith(prefix)) {
          return i;
        }
      }
      return -1;
    }

    /** Which of the two workers prints a line starting with {@code prefix} first (it is not taken). */
    static Worker first(String prefix, Worker a, Worker b) throws InterruptedException {
      long end = System.nanoTime() + PATIENCE.toNanos();
      while (System.nanoTime() < end) {
        if (a.pending(prefix) >= 0) {
          return a;
        }
        if (b.pending(prefix) >= 0) {
          return b;
        }
        Thread.sleep(20);
      }
      throw new AssertionError("neither " + a.name + " nor " + b.name + " printed " + prefix);
    }

    /** SIGKILL: no shutdown hook, no release; the kernel closes its connection. */
    void kill() throws InterruptedException {
      process.destroyForcibly();
      assertTrue(process.waitFor(PATIENCE.toSeconds(), TimeUnit.SECONDS), name + " killed");
    }

    @Override
    public void close() throws InterruptedException {
      if (process.isAlive()) {
        process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
      }
    }
  }
}
