package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** DeleteJob and the server's limits (QUOTA_EXCEEDED, OVERLOADED, JOB_IN_USE), against the real server. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class LimitsTest {
  static final Duration LONG = Duration.ofSeconds(30);

  @Test
  void quotasAndDeleteJob() throws Exception {
    try (ServerProcess s = ServerProcess.withArgs("--max-jobs", "1", "--max-keys-per-job", "1");
         Client c = Client.connect(s.target)) {
      long t1 = c.acquire("a", "h", LONG).lease().token();

      // One job is the most: a second is refused, and nothing is made.
      QuotaExceededException jobs = assertThrows(QuotaExceededException.class, () -> c.acquire("b", "h", LONG));
      assertEquals("--max-jobs", jobs.limit());
      assertEquals(1, jobs.max().getAsLong());
      assertEquals("QUOTA_EXCEEDED", jobs.reason());
      assertFalse(jobs.isRetryable());
      assertEquals(List.of("a"), c.listLeases("").stream().map(Lease::job).toList());

      // One key is the most: a second is refused, by checkedWrite and on a
      // write stream; the first key may still be written.
      assertEquals(1, c.checkedWrite("a", t1, "k1", "v"));
      QuotaExceededException keys = assertThrows(QuotaExceededException.class, () -> c.checkedWrite("a", t1, "k2", "v"));
      assertEquals("--max-keys-per-job", keys.limit());
      assertEquals(1, keys.max().getAsLong());
      List<WriteOutcome> out;
      try (WriteStream ws = c.writeStream()) {
        out = ws.write(List.of(StreamWrite.put("a", t1, "k1", "w"), StreamWrite.put("a", t1, "k3", "v")));
      }
      assertEquals(WriteOutcome.written(2), out.get(0));
      assertEquals(WriteOutcome.Kind.QUOTA_EXCEEDED, out.get(1).kind());
      assertFalse(out.get(1).isWritten());
      assertTrue(out.get(1).message().contains("--max-keys-per-job"), out.get(1).message());
      List<KeyInfo> live = c.listKeys("a", new byte[0]);
      assertEquals(1, live.size());
      assertArrayEquals("k1".getBytes(StandardCharsets.UTF_8), live.get(0).key());

      // A held job is not deleted.
      JobInUseException inUse = assertThrows(JobInUseException.class, () -> c.deleteJob("a"));
      assertEquals("JOB_IN_USE", inUse.reason());
      assertFalse(inUse.isRetryable());
      assertTrue(c.read("a", "k1").found());

      c.release("a", "h", t1);
      assertTrue(c.deleteJob("a"));
      assertFalse(c.deleteJob("a"));
      assertEquals(List.of(), c.listLeases(""));
      assertFalse(c.read("a", "k1").found());

      // Created again, it gets a token above the old one; its room is back.
      long t2 = c.acquire("a", "h", LONG).lease().token();
      assertTrue(Long.compareUnsigned(t2, t1) > 0, t2 + " > " + t1);
      assertEquals(1, c.checkedWrite("a", t2, "k2", "v"));
    }
  }

  @Test
  void aCallOverTheConnectionLimitIsOverloaded() throws Exception {
    try (ServerProcess s = ServerProcess.withArgs("--max-in-flight-per-connection", "1");
         Client c = Client.connect(s.target)) {
      c.acquire("j", "a", LONG);
      CompletableFuture<Void> waiting = CompletableFuture.runAsync(() -> {
        try {
          c.acquire("j", "b", LONG, Duration.ofSeconds(20));
        } catch (LeaseholdException e) {
          // the server stops under it
        }
      });
      s.waitWaiters(1);
      // The waiting Acquire takes the connection's one place.
      OverloadedException e = assertThrows(OverloadedException.class, () -> c.getLease("j"));
      assertEquals("--max-in-flight-per-connection", e.limit());
      assertEquals(1, e.max().getAsLong());
      assertEquals("OVERLOADED", e.reason());
      assertTrue(e.isRetryable());
      assertTrue(e instanceof UnavailableException);
      s.signal("TERM");
      waiting.get(15, TimeUnit.SECONDS);
    }
  }
}
