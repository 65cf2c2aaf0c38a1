package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link Client#observe} (and the {@link Watch} iterator) against a real
 * server: the current lease first, then acquired, released and expired;
 * closing ends it cleanly; a server stopping (SIGTERM) ends it with the
 * typed exception. Also the elector's {@code onNewLeader}: every grant, in
 * token order, once.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ObserveTest {
  static final Duration PATIENCE = ServerProcess.PATIENCE;
  static final Duration LONG = Duration.ofSeconds(60);

  /** A listener that queues what it hears. */
  static final class Heard implements LeaseListener {
    final BlockingQueue<LeaseEvent> events = new LinkedBlockingQueue<>();
    final CompletableFuture<LeaseholdException> error = new CompletableFuture<>();
    volatile boolean completed;

    @Override
    public void onEvent(LeaseEvent e) {
      events.add(e);
    }

    @Override
    public void onError(LeaseholdException e) {
      error.complete(e);
    }

    @Override
    public void onCompleted() {
      completed = true;
    }

    LeaseEvent next() throws InterruptedException {
      LeaseEvent e = events.poll(PATIENCE.toSeconds(), TimeUnit.SECONDS);
      if (e == null) {
        throw new AssertionError("no event within " + PATIENCE);
      }
      return e;
    }
  }

  @Test
  void observeHearsTheCurrentLeaseThenEachChangeAndCloseEndsIt() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "observed";
      long first = client.acquire(job, "a", LONG).lease().token();
      Heard heard = new Heard();
      Observation o = client.observe(job, heard);
      assertEquals(job, o.job());
      LeaseEvent current = heard.next();
      assertEquals(LeaseEvent.Kind.CURRENT, current.kind());
      assertEquals("a", current.lease().holder());
      assertEquals(first, current.lease().token());

      client.renew(job, "a", first, LONG); // renewals send nothing
      client.release(job, "a", first);
      LeaseEvent released = heard.next();
      assertEquals(LeaseEvent.Kind.RELEASED, released.kind());
      assertNull(released.lease().holder());

      long second = client.acquire(job, "b", Duration.ofMillis(500)).lease().token();
      LeaseEvent acquired = heard.next();
      assertEquals(LeaseEvent.Kind.ACQUIRED, acquired.kind());
      assertEquals("b", acquired.lease().holder());
      assertEquals(second, acquired.lease().token());

      LeaseEvent expired = heard.next(); // b does not renew
      assertEquals(LeaseEvent.Kind.EXPIRED, expired.kind());
      assertNull(expired.lease().holder());
      assertEquals(second, expired.lease().token());

      o.close();
      assertNull(o.done().get(PATIENCE.toSeconds(), TimeUnit.SECONDS), "closing ends it without an error");
      client.acquire(job, "c", LONG);
      assertFalse(heard.error.isDone(), "no error after close");
      assertTrue(heard.events.isEmpty(), "nothing heard after close: " + heard.events);
      o.close(); // idempotent
    }
  }

  @Test
  void aServerThatStopsEndsTheObservationWithTheTypedException() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      Heard heard = new Heard();
      try (Observation o = client.observe("stopping", heard)) {
        LeaseEvent current = heard.next();
        assertEquals(LeaseEvent.Kind.CURRENT, current.kind());
        assertFalse(current.lease().isHeld(), "a job never granted is free");
        server.process.destroy(); // SIGTERM
        LeaseholdException e = heard.error.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
        assertInstanceOf(UnavailableException.class, e, "ShuttingDownException, or the connection's end: " + e);
        ExecutionException done = assertThrows(ExecutionException.class,
            () -> o.done().get(PATIENCE.toSeconds(), TimeUnit.SECONDS));
        assertInstanceOf(UnavailableException.class, done.getCause());
        assertFalse(heard.completed);
      }
    }
  }

  @Test
  void theWatchIteratorHearsTheSameAndEndsWhenClosed() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "watched";
      try (Watch w = client.watch(job)) {
        LeaseEvent current = w.next();
        assertEquals(LeaseEvent.Kind.CURRENT, current.kind());
        assertEquals(0, current.lease().token());
        long t = client.acquire(job, "a", LONG).lease().token();
        LeaseEvent acquired = w.next();
        assertEquals(LeaseEvent.Kind.ACQUIRED, acquired.kind());
        assertEquals(t, acquired.lease().token());
        w.close();
        assertFalse(w.hasNext(), "closed: no more events, no error");
      }
    }
  }

  /**
   * Three grants to two holders: a plain holder x (token 1), the elector
   * (token 2, when x releases), x again (token 3, handed over by the
   * elector's transfer). onNewLeader hears exactly those, in token order,
   * each once, its own grant included.
   */
  @Test
  void onNewLeaderHearsEveryGrantInTokenOrder() throws Exception {
    try (ServerProcess server = new ServerProcess(); Client client = Client.connect(server.target)) {
      String job = "new-leaders";
      List<String> heard = new ArrayList<>();
      long first = client.acquire(job, "x", LONG).lease().token();
      assertEquals(1, first);
      try (Elector e = Elector.builder(client, job, "elector").ttl(Duration.ofSeconds(3))
          .onNewLeader((holder, token) -> {
            synchronized (heard) {
              heard.add(holder + "=" + token);
            }
          }).start()) {
        ServerProcess.waitUntil(PATIENCE, "x reported", () -> snapshot(heard).contains("x=1"));
        server.waitWaiters(1); // the elector waits
        client.release(job, "x", first);
        assertEquals(2, e.awaitElected(PATIENCE).getAsLong());
        // x waits, then the elector hands the lease to it.
        CompletableFuture<Acquired> x = client.acquireAsync(job, "x", LONG, Duration.ofMinutes(5));
        server.waitWaiters(1);
        assertEquals(3, e.transfer().token());
        assertEquals(3, x.get(PATIENCE.toSeconds(), TimeUnit.SECONDS).lease().token());
        String mine = e.holder();
        ServerProcess.waitUntil(PATIENCE, "three reports", () -> snapshot(heard).size() >= 3);
        // The elector campaigns again behind x: nothing more is granted.
        server.waitWaiters(1);
        assertEquals(List.of("x=1", mine + "=2", "x=3"), snapshot(heard));
      }
      assertEquals(3, snapshot(heard).size(), "nothing after close");
    }
  }

  static List<String> snapshot(List<String> l) {
    synchronized (l) {
      return new ArrayList<>(l);
    }
  }
}
