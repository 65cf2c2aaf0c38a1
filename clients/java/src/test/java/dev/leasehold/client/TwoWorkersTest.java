package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The two-workers example (clients/java/examples/two-workers), built as a
 * user builds it (mvn install here, then mvn package there; clients/test.sh
 * does both), run as two real processes against a real server: exactly one
 * leads with token 1; SIGTERM to it makes it resign and exit 0, and the
 * other leads with token 2 within a few seconds.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TwoWorkersTest {
  static final String JAR = "examples/two-workers/target/two-workers.jar";

  /** One worker process and the lines it prints. */
  static final class Worker implements AutoCloseable {
    final String name;
    final Process process;
    final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    final List<String> seen = new ArrayList<>();

    Worker(String name, Path jar, String job, String target) throws IOException {
      this.name = name;
      Path java = Paths.get(System.getProperty("java.home"), "bin", "java");
      process = new ProcessBuilder(java.toString(), "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
          "-jar", jar.toString(), job, target)
          .redirectError(ProcessBuilder.Redirect.INHERIT).start();
      reader = new Thread(() -> {
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

    /** Lines up to here were looked at by {@link #await}. */
    private int cursor;
    private Thread reader;

    /**
     * The next line (after the one the last call returned) starting with
     * {@code prefix}, waiting up to {@code ms} for it; null if none came.
     */
    String await(String prefix, long ms) throws InterruptedException {
      long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
      while (true) {
        lines.drainTo(seen);
        while (cursor < seen.size()) {
          String s = seen.get(cursor++);
          if (s.startsWith(prefix)) {
            return s;
          }
        }
        long left = end - System.nanoTime();
        String line = left > 0 ? lines.poll(left, TimeUnit.NANOSECONDS) : null;
        if (line == null) {
          return null;
        }
        seen.add(line);
      }
    }

    /** Takes in every line printed so far; whether one starts with {@code prefix}. */
    boolean printed(String prefix) {
      lines.drainTo(seen);
      return seen.stream().anyMatch(s -> s.startsWith(prefix));
    }

    /**
     * SIGTERM, keeping its output readable ({@code Process.destroy()} would
     * close our end of its stdout).
     */
    void sigterm() {
      assertTrue(process.toHandle().destroy(), "SIGTERM sent");
    }

    /** Waits for the process to exit and for its last lines; its exit status. */
    int exited() throws InterruptedException {
      assertTrue(process.waitFor(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS), name + " exited");
      reader.join(ServerProcess.PATIENCE.toMillis());
      return process.exitValue();
    }

    @Override
    public void close() throws InterruptedException {
      if (process.isAlive()) {
        process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
      }
    }
  }

  @Test
  void oneLeadsAndOnSigtermTheOtherTakesOverWithTheNextToken() throws Exception {
    Path jar = BuildTest.built(JAR, "mvn install -DskipTests here, then mvn package in examples/two-workers");
    try (ServerProcess server = new ServerProcess();
        Worker w1 = new Worker("w1", jar, "two-workers", server.target);
        Worker w2 = new Worker("w2", jar, "two-workers", server.target)) {
      assertNotNull(w1.await("worker ", 30_000), "w1 started");
      assertNotNull(w2.await("worker ", 30_000), "w2 started");
      // Exactly one leads, with token 1.
      Worker leader = null;
      long end = System.nanoTime() + ServerProcess.PATIENCE.toNanos();
      while (leader == null && System.nanoTime() < end) {
        if (w1.printed("leader ")) {
          leader = w1;
        } else if (w2.printed("leader ")) {
          leader = w2;
        } else {
          Thread.sleep(20);
        }
      }
      assertNotNull(leader, "one of them leads");
      Worker other = leader == w1 ? w2 : w1;
      assertEquals("leader token=1", leader.await("leader ", 0));
      assertNotNull(leader.await("wrote version=", ServerProcess.PATIENCE.toMillis()), "the leader writes with its token");
      assertNotNull(leader.await("wrote version=", ServerProcess.PATIENCE.toMillis()), "and goes on writing");
      assertTrue(!other.printed("leader "), "only one leads");

      // SIGTERM: the leader resigns and exits 0; the other leads with token 2,
      // handed over by the release. The example's TTL is 5 s, no longer than
      // a stall: the server's counters, not a bound on the time, tell the
      // release from an expiry.
      long t = System.nanoTime();
      leader.sigterm();
      String next = other.await("leader ", ServerProcess.PATIENCE.toMillis());
      assertEquals("leader token=2", next, "the other took over");
      System.out.println("took over " + (System.nanoTime() - t) / 1_000_000 + " ms after the SIGTERM");
      assertEquals(0, server.metric("leasehold_expiries_total"), "the take-over came from an expiry, not the release");
      assertTrue(server.metric("leasehold_releases_total") >= 1, "the leader released");
      assertEquals(0, leader.exited(), "the leader exited 0");
      assertTrue(leader.printed("resigned"), "the leader resigned");
      assertNotNull(other.await("wrote version=", ServerProcess.PATIENCE.toMillis()), "the new leader writes with token 2");
      assertNotNull(other.await("wrote version=", ServerProcess.PATIENCE.toMillis()), "and goes on writing");

      // The other stops the same way.
      other.sigterm();
      assertEquals(0, other.exited());
      assertTrue(other.printed("resigned"));
    }
  }
}
