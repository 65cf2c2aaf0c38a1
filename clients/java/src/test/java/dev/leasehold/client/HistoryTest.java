package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link Client#history} (one page, every page, the page iterator and the
 * futures) against a real server started with {@code --enable-chaos}:
 * several tenures newest first with their holders and ends, paging, the
 * first page's chaos events, a job with no history, and the typed errors.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class HistoryTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final Duration LONG = Duration.ofSeconds(60);

  @Test
  void historyListsEveryTenureNewestFirstPageByPage() throws Exception {
    try (ServerProcess server = ServerProcess.withArgs("--enable-chaos"); Client client = Client.connect(server.target)) {
      String job = "history";
      Instant before = Instant.now().minusSeconds(60);
      // Five tenures: released, released, chaos, transferred, live.
      long t1 = client.acquire(job, "a", LONG).lease().token();
      client.release(job, "a", t1);
      long t2 = client.acquire(job, "b", LONG).lease().token();
      client.release(job, "b", t2);
      long t3 = client.acquire(job, "a", LONG).lease().token();
      client.chaos().expire(job);
      long t4 = client.acquire(job, "b", LONG).lease().token();
      var waiting = client.acquireAsync(job, "a", LONG, Duration.ofMinutes(5));
      server.waitWaiters(1);
      client.transferLease(job, "b", t4);
      long t5 = waiting.get(PATIENCE.toSeconds(), TimeUnit.SECONDS).lease().token();
      assertEquals(List.of(1L, 2L, 3L, 4L, 5L), List.of(t1, t2, t3, t4, t5));

      HistoryPage all = client.history(job, 0, null);
      assertFalse(all.hasNext());
      assertEquals(List.of(5L, 4L, 3L, 2L, 1L), tokens(all.tenures()));
      Tenure live = all.tenures().get(0);
      assertEquals("a", live.holder());
      assertEquals(Tenure.End.NOT_ENDED, live.end());
      assertFalse(live.ended());
      assertNull(live.endedAt());
      assertEquals(LONG, live.ttl());
      assertTrue(live.grantedAt().isAfter(before), live.grantedAt().toString());
      assertEquals(Tenure.End.TRANSFERRED, all.tenures().get(1).end());
      assertEquals("b", all.tenures().get(1).holder());
      assertEquals(Tenure.End.CHAOS, all.tenures().get(2).end());
      assertEquals(Tenure.End.RELEASED, all.tenures().get(3).end());
      Tenure oldest = all.tenures().get(4);
      assertEquals("a", oldest.holder());
      assertNotNull(oldest.endedAt());
      assertFalse(oldest.endedAt().isBefore(oldest.grantedAt()));
      assertNull(oldest.principal(), "no policy");
      // The chaos API's action, on the first page.
      assertEquals(1, all.chaos().size(), all.chaos().toString());
      assertEquals("expire", all.chaos().get(0).action());
      assertFalse(all.chaos().get(0).detail().isEmpty());
      assertNotNull(all.chaos().get(0).at());

      // Pages of two: 5 4 | 3 2 | 1, chaos on the first only.
      HistoryPage p1 = client.history(job, 2, "");
      assertEquals(List.of(5L, 4L), tokens(p1.tenures()));
      assertTrue(p1.hasNext());
      assertEquals(1, p1.chaos().size());
      HistoryPage p2 = client.history(job, 2, p1.nextPageToken());
      assertEquals(List.of(3L, 2L), tokens(p2.tenures()));
      assertTrue(p2.chaos().isEmpty(), "chaos on the first page only");
      HistoryPage p3 = client.history(job, 2, p2.nextPageToken());
      assertEquals(List.of(1L), tokens(p3.tenures()));
      assertFalse(p3.hasNext());

      List<Long> iterated = new ArrayList<>();
      int pages = 0;
      for (HistoryPage page : client.historyPages(job, 2)) {
        pages++;
        iterated.addAll(tokens(page.tenures()));
      }
      assertEquals(3, pages);
      assertEquals(List.of(5L, 4L, 3L, 2L, 1L), iterated);
      assertEquals(List.of(5L, 4L, 3L, 2L, 1L), tokens(client.history(job)));
      assertEquals(List.of(5L, 4L, 3L, 2L, 1L),
          tokens(client.historyAsync(job).get(PATIENCE.toSeconds(), TimeUnit.SECONDS)));
      HistoryPage async = client.historyAsync(job, 2, p1.nextPageToken()).get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
      assertEquals(List.of(3L, 2L), tokens(async.tenures()));

      // A job with no history has an empty one, not an error.
      HistoryPage none = client.history("never-granted", 0, "");
      assertTrue(none.tenures().isEmpty());
      assertFalse(none.hasNext());
      assertTrue(client.history("never-granted").isEmpty());

      // A page token of another job's history, or made up: the typed error.
      InvalidArgumentException bad = assertThrows(InvalidArgumentException.class,
          () -> client.history("another-job", 2, p1.nextPageToken()));
      assertEquals("page_token", bad.field());
      assertEquals("page_token",
          assertThrows(InvalidArgumentException.class, () -> client.history(job, 2, "not-a-token")).field());
      ExecutionException e = assertThrows(ExecutionException.class,
          () -> client.historyAsync(job, 2, "not-a-token").get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
      assertInstanceOf(InvalidArgumentException.class, e.getCause());
      assertEquals("job", assertThrows(InvalidArgumentException.class, () -> client.history("", 0, "")).field());
      assertThrows(IllegalArgumentException.class, () -> client.history(job, -1, ""));
    }
  }

  static List<Long> tokens(List<Tenure> tenures) {
    return tenures.stream().map(Tenure::token).toList();
  }
}
