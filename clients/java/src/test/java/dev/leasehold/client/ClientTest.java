package dev.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClientTest {
  static ServerProcess server;
  static Client client;
  static final AtomicInteger JOBS = new AtomicInteger();
  static final Duration LONG = Duration.ofSeconds(30);

  @BeforeAll
  static void start() throws Exception {
    server = new ServerProcess();
    client = Client.connect(server.target);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) { // null: skipped, no server binary
      server.close();
    }
  }

  static String job(String prefix) {
    return prefix + "-" + JOBS.incrementAndGet();
  }

  static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void holderIdentityIsNameAtProcessUuid() {
    String h = Client.processHolder("billing");
    assertTrue(h.matches("billing@[0-9a-f-]{36}"), h);
    assertTrue(Client.processHolder("x").endsWith(h.substring("billing".length())));
  }

  @Test
  void acquireBusyRenewReleaseGetList() {
    String job = job("basic");
    Acquired a = client.acquire(job, "a", LONG);
    assertTrue(a.acquired());
    assertEquals("a", a.lease().holder());
    assertEquals(1, a.lease().token());
    assertEquals(LONG, a.lease().ttl());
    Acquired busy = client.acquire(job, "b", LONG);
    assertFalse(busy.acquired());
    assertEquals("a", busy.lease().holder());
    assertTrue(busy.lease().remaining().compareTo(Duration.ZERO) > 0);
    Lease renewed = client.renew(job, "a", 1, Duration.ofSeconds(20));
    assertEquals(1, renewed.token());
    assertEquals(Duration.ofSeconds(20), renewed.ttl());
    assertEquals("a", client.getLease(job).holder());
    assertTrue(client.listLeases(job).stream().anyMatch(l -> l.job().equals(job)));
    client.release(job, "a", 1);
    Lease free = client.getLease(job);
    assertNull(free.holder());
    assertNull(free.ttl());
    assertEquals(1, free.token());
    assertEquals(2, client.acquire(job, "b", LONG).lease().token());
  }

  @Test
  void waitingAcquireIsGrantedOnRelease() throws Exception {
    String job = job("wait");
    client.acquire(job, "a", LONG);
    CompletableFuture<Acquired> waiting =
        CompletableFuture.supplyAsync(() -> client.acquire(job, "b", LONG, ServerProcess.PATIENCE));
    server.waitWaiters(1);
    long released = System.nanoTime();
    client.release(job, "a", 1);
    Acquired a = waiting.get(ServerProcess.PATIENCE.toSeconds(), TimeUnit.SECONDS);
    assertTrue(a.acquired());
    assertEquals(2, a.lease().token());
    // Granted by the release, not by the expiry of a's 30 s lease: a third
    // of it is longer than a stall.
    long took = System.nanoTime() - released;
    assertTrue(took < LONG.toNanos() / 3, "granted " + took / 1e6 + " ms after the release");
  }

  @Test
  void writeReadDeleteListKeys() {
    String job = job("store");
    long t = client.acquire(job, "w", LONG).lease().token();
    assertEquals(1, client.checkedWrite(job, t, "k1", "v1"));
    assertEquals(2, client.checkedWrite(job, t, b("k1"), b("v2")));
    assertEquals(1, client.checkedWrite(job, t, "k2", ""));
    Value v = client.read(job, "k1");
    assertTrue(v.found());
    assertEquals("v2", v.valueUtf8());
    assertEquals(t, v.token());
    assertEquals(2, v.version());
    List<KeyInfo> keys = client.listKeys(job, new byte[0]);
    assertEquals(2, keys.size());
    assertArrayEquals(b("k1"), keys.get(0).key());
    assertEquals(2, keys.get(0).size());
    assertEquals(3, client.delete(job, t, b("k1")));
    assertFalse(client.read(job, "k1").found());
    assertEquals(1, client.listKeys(job, b("k")).size());
  }

  @Test
  void watchCurrentThenChanges() {
    String job = job("watch");
    try (Watch w = client.watch(job)) {
      assertEquals(LeaseEvent.Kind.CURRENT, w.next().kind());
      client.acquire(job, "a", LONG);
      LeaseEvent e = w.next();
      assertEquals(LeaseEvent.Kind.ACQUIRED, e.kind());
      assertEquals("a", e.lease().holder());
      client.release(job, "a", 1);
      e = w.next();
      assertEquals(LeaseEvent.Kind.RELEASED, e.kind());
      assertNull(e.lease().holder());
      client.acquire(job, "b", Duration.ofMillis(200));
      assertEquals(LeaseEvent.Kind.ACQUIRED, w.next().kind());
      e = w.next();
      assertEquals(LeaseEvent.Kind.EXPIRED, e.kind());
      assertEquals(2, e.lease().token());
      w.close();
      assertFalse(w.hasNext());
    }
  }

  @Test
  void leaseLostNamesCurrentTokenAndHolder() throws Exception {
    String job = job("lost");
    client.acquire(job, "a", Duration.ofMillis(200));
    ServerProcess.waitUntil(ServerProcess.PATIENCE, "expiry", () -> client.getLease(job).holder() == null);
    client.acquire(job, "b", LONG);
    LeaseLostException e = assertThrows(LeaseLostException.class, () -> client.renew(job, "a", 1, LONG));
    assertEquals(2, e.currentToken().getAsLong());
    assertEquals("b", e.currentHolder());
    assertEquals("LEASE_LOST", e.reason());
    assertEquals(Status.Code.FAILED_PRECONDITION, e.code());
    assertFalse(e.isRetryable());
    assertThrows(LeaseLostException.class, () -> client.release(job, "a", 1));
  }

  @Test
  void fencedNamesCurrentToken() {
    String job = job("fenced");
    client.acquire(job, "a", LONG);
    client.checkedWrite(job, 1, "k", "from 1");
    client.release(job, "a", 1);
    client.acquire(job, "b", LONG);
    FencedException e = assertThrows(FencedException.class, () -> client.checkedWrite(job, 1, "k", "stale"));
    assertEquals(2, e.currentToken().getAsLong());
    assertEquals("FENCED", e.reason());
    assertEquals("from 1", client.read(job, "k").valueUtf8());
  }

  @Test
  void invalidArgumentNamesTheField() {
    String job = job("invalid");
    Map<String, Runnable> cases = Map.of(
        "job", () -> client.acquire("", "h", Duration.ofSeconds(1)),
        "holder", () -> client.acquire(job, "", Duration.ofSeconds(1)),
        "ttl", () -> client.acquire(job, "h", Duration.ofMillis(1)),
        "key", () -> client.checkedWrite(job, 1, new byte[0], b("v")));
    cases.forEach((field, call) -> {
      InvalidArgumentException e = assertThrows(InvalidArgumentException.class, call::run, field);
      assertSame(InvalidArgumentException.class, e.getClass(), field);
      assertEquals(field, e.field());
      assertEquals(Status.Code.INVALID_ARGUMENT, e.code());
    });
    InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
        () -> client.acquire(job, "h", Duration.ofHours(2)));
    assertEquals("ttl", e.field());
    assertEquals(0, client.getLease(job).token(), "bad input changes nothing");
  }

  @Test
  void unknownToken() {
    String job = job("unknown");
    client.acquire(job, "a", LONG);
    UnknownTokenException e = assertThrows(UnknownTokenException.class, () -> client.checkedWrite(job, 7, "k", "v"));
    assertEquals(1, e.currentToken().getAsLong());
    assertTrue(e instanceof InvalidArgumentException);
  }

  @Test
  void unreachableServerIsUnavailable() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    try (Client c = Client.connect("127.0.0.1:" + port)) {
      UnavailableException e = assertThrows(UnavailableException.class, () -> c.getLease("j"));
      assertTrue(e.isRetryable());
    }
  }

  @Test
  void waitingAcquireEndsWithShuttingDown() throws Exception {
    try (ServerProcess own = new ServerProcess(); Client c = Client.connect(own.target)) {
      c.acquire("j", "a", LONG);
      CompletableFuture<Throwable> waiting = CompletableFuture.supplyAsync(() -> {
        try {
          c.acquire("j", "b", LONG, Duration.ofSeconds(20));
          return null;
        } catch (LeaseholdException e) {
          return e;
        }
      });
      own.waitWaiters(1);
      own.signal("TERM");
      Throwable e = waiting.get(15, TimeUnit.SECONDS);
      assertTrue(e instanceof ShuttingDownException, String.valueOf(e));
      assertTrue(((LeaseholdException) e).isRetryable());
    }
  }

  @Test
  void decodingOfEveryReason() {
    record Case(Status.Code code, String reason, Class<?> cls) {}
    List<Case> cases = List.of(
        new Case(Status.Code.FAILED_PRECONDITION, "LEASE_LOST", LeaseLostException.class),
        new Case(Status.Code.FAILED_PRECONDITION, "FENCED", FencedException.class),
        new Case(Status.Code.INVALID_ARGUMENT, "INVALID_ARGUMENT", InvalidArgumentException.class),
        new Case(Status.Code.INVALID_ARGUMENT, "UNKNOWN_TOKEN", UnknownTokenException.class),
        new Case(Status.Code.UNAVAILABLE, "STORAGE", StorageException.class),
        new Case(Status.Code.UNAVAILABLE, "SHUTTING_DOWN", ShuttingDownException.class),
        new Case(Status.Code.RESOURCE_EXHAUSTED, "DISK_FULL", DiskFullException.class),
        new Case(Status.Code.UNAUTHENTICATED, "UNAUTHENTICATED", UnauthenticatedException.class),
        new Case(Status.Code.PERMISSION_DENIED, "PERMISSION_DENIED", PermissionDeniedException.class),
        new Case(Status.Code.RESOURCE_EXHAUSTED, "OVERLOADED", OverloadedException.class),
        new Case(Status.Code.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", QuotaExceededException.class),
        new Case(Status.Code.FAILED_PRECONDITION, "JOB_IN_USE", JobInUseException.class),
        new Case(Status.Code.FAILED_PRECONDITION, "NO_SUCCESSOR", NoSuccessorException.class));
    Consumer<Case> check = c -> {
      LeaseholdException e = Errors.from(status(c.code, c.reason, "leasehold"));
      assertSame(c.cls, e.getClass(), c.reason);
      assertEquals(c.reason, e.reason());
    };
    cases.forEach(check);
    DiskFullException full = (DiskFullException) Errors.from(status(Status.Code.RESOURCE_EXHAUSTED, "DISK_FULL", "leasehold"));
    assertEquals(10, full.freeBytes().getAsLong());
    assertEquals(4096, full.neededBytes().getAsLong());
    assertTrue(full.isRetryable());
    QuotaExceededException quota = (QuotaExceededException) Errors.from(status(Status.Code.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", "leasehold"));
    assertEquals("--max-watchers", quota.limit());
    assertEquals(7, quota.max().getAsLong());
    assertFalse(quota.isRetryable());
    OverloadedException busy = (OverloadedException) Errors.from(status(Status.Code.RESOURCE_EXHAUSTED, "OVERLOADED", "leasehold"));
    assertEquals("--max-watchers", busy.limit());
    assertEquals(7, busy.max().getAsLong());
    assertTrue(busy.isRetryable());
    assertSame(UnavailableException.class, Errors.from(status(Status.Code.UNAVAILABLE, "FENCED", "other")).getClass());
    assertSame(PermissionDeniedException.class, Errors.from(Status.PERMISSION_DENIED.asRuntimeException()).getClass());
    assertSame(UnauthenticatedException.class, Errors.from(Status.UNAUTHENTICATED.asRuntimeException()).getClass());
    assertSame(LeaseholdException.class, Errors.from(Status.FAILED_PRECONDITION.asRuntimeException()).getClass());
  }

  private static Throwable status(Status.Code code, String reason, String domain) {
    ErrorInfo info = ErrorInfo.newBuilder().setReason(reason).setDomain(domain)
        .putMetadata("current_token", "5").putMetadata("field", "ttl")
        .putMetadata("free_bytes", "10").putMetadata("needed_bytes", "4096")
        .putMetadata("limit", "--max-watchers").putMetadata("max", "7").build();
    return StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
        .setCode(code.value()).setMessage("m").addDetails(Any.pack(info)).build());
  }
}
