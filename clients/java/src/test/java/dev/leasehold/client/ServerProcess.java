package dev.leasehold.client;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Comparator;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The real {@code leasehold serve}, on 127.0.0.1 with ports the OS picks. No
 * sleep waits for start-up: the server prints one line once both listeners
 * are bound.
 */
final class ServerProcess implements AutoCloseable {
  private static final Pattern LISTENING = Pattern.compile("^leasehold listening on (\\S+) admin (\\S+)$");

  final Process process;
  final String target;
  final String admin;
  private final Path dataDir;

  /**
   * The server binary: {@code LEASEHOLD_BIN} (or the {@code leasehold.bin}
   * property) if set, else {@code leasehold} on the PATH, else the debug or
   * release build of this repository ({@code ../../target/...} from
   * clients/java). When there is none the test is skipped (a JUnit
   * assumption, with a message saying how to get one), unless
   * {@code -Dleasehold.requireServer=true} (as clients/test.sh sets): then
   * it fails.
   */
  static Path binary() {
    boolean require = Boolean.getBoolean("leasehold.requireServer");
    if (!require && !Boolean.getBoolean("leasehold.serverTests")) {
      // A user's `mvn install` builds and installs without a server and
      // without the timing-sensitive tests that need one.
      String why = "the tests that need a leasehold server run with -Pserver-tests "
          + "(or -Dleasehold.serverTests=true; -Dleasehold.requireServer=true also fails them without a binary)";
      if (!warned) {
        warned = true;
        System.err.println("SKIPPED: " + why);
      }
      org.junit.jupiter.api.Assumptions.abort(why);
    }
    String bin = System.getProperty("leasehold.bin");
    if (bin == null || bin.isEmpty() || bin.startsWith("${")) {
      bin = System.getenv("LEASEHOLD_BIN");
    }
    try {
      return binary(findBinary(bin, System.getenv("PATH"), Paths.get("")), bin, require);
    } catch (org.opentest4j.TestAbortedException e) {
      if (!warned) {
        warned = true;
        System.err.println("SKIPPED: " + e.getMessage());
      }
      throw e;
    }
  }

  private static volatile boolean warned;

  /**
   * {@code found}, or: with {@code require}, an {@link IllegalStateException};
   * without, the test is skipped ({@link org.opentest4j.TestAbortedException}
   * with a message saying why; {@link #binary()} prints it once).
   */
  static Path binary(Path found, String bin, boolean require) {
    if (found != null) {
      return found;
    }
    String why = bin != null && !bin.isEmpty()
        ? "LEASEHOLD_BIN names " + bin + ", which is not an executable file"
        : "no leasehold server binary: set LEASEHOLD_BIN, put leasehold on the PATH, "
            + "or build one (cargo build --bin leasehold)";
    if (require) {
      throw new IllegalStateException(why + " (leasehold.requireServer=true: the tests that need a server fail)");
    }
    why += "; the tests that need a server are skipped";
    org.junit.jupiter.api.Assumptions.abort(why);
    return null; // not reached
  }

  /**
   * The server binary, or null: {@code bin} (LEASEHOLD_BIN) when set, else
   * {@code leasehold} in a directory of {@code pathEnv}, else
   * {@code ../../target/debug/leasehold} or {@code ../../target/release/leasehold}
   * from {@code javaDir} (clients/java).
   */
  static Path findBinary(String bin, String pathEnv, Path javaDir) {
    if (bin != null && !bin.isEmpty()) {
      Path path = Paths.get(bin);
      return executable(path) ? path : null;
    }
    if (pathEnv != null) {
      for (String dir : pathEnv.split(java.io.File.pathSeparator)) {
        if (!dir.isEmpty() && executable(Paths.get(dir, "leasehold"))) {
          return Paths.get(dir, "leasehold");
        }
      }
    }
    for (String build : new String[] {"debug", "release"}) {
      Path candidate = javaDir.resolve(Paths.get("..", "..", "target", build, "leasehold")).normalize();
      if (executable(candidate)) {
        return candidate;
      }
    }
    return null;
  }

  private static boolean executable(Path p) {
    return Files.isRegularFile(p) && Files.isExecutable(p);
  }

  /** With {@link #secure()}: the dir of ca.pem, alice.pem, alice-key.pem, alice.token, bob...; else null. */
  final Path pki;

  ServerProcess() throws Exception {
    this(false);
  }

  /**
   * Writes the test CA, certificates, tokens and policy of
   * clients/tools/pki.sh into {@code dir}: alice may lease, write and read
   * every job; bob may only read jobs "bob/...".
   */
  static Path makePki(Path dir) throws Exception {
    Process p = new ProcessBuilder("bash", Paths.get("..", "tools", "pki.sh").toString(), dir.toString())
        .redirectError(ProcessBuilder.Redirect.INHERIT).start();
    if (p.waitFor() != 0) {
      throw new IllegalStateException("pki.sh failed");
    }
    return dir;
  }

  /** A server with TLS, mutual TLS and the policy of {@link #makePki}. */
  static ServerProcess secure() throws Exception {
    return new ServerProcess(true, "--tls-cert", "server.pem", "--tls-key", "server-key.pem",
        "--tls-client-ca", "ca.pem", "--policy", "policy.toml");
  }

  /** A server with the policy of {@link #makePki} and no TLS. */
  static ServerProcess withPolicyOnly() throws Exception {
    return new ServerProcess(true, "--policy", "policy.toml");
  }

  /** A server with more {@code leasehold serve} arguments ({@code "--max-jobs", "1"}...). */
  static ServerProcess withArgs(String... extra) throws Exception {
    return new ServerProcess(false, extra);
  }

  /**
   * {@code extra} go to {@code leasehold serve}; with {@code withPki}, those
   * that are not flags name files of the PKI dir.
   */
  private ServerProcess(boolean withPki, String... extra) throws Exception {
    this(newDataDir(), "127.0.0.1:0", withPki, extra);
  }

  /** A fresh data dir, once there is a server to run (else the test is skipped first). */
  private static Path newDataDir() throws IOException {
    binary();
    return Files.createTempDirectory("leasehold-java-");
  }

  /** Starts the server again on the same port and data dir, after {@link #kill()}. */
  ServerProcess restart() throws Exception {
    return new ServerProcess(dataDir, target, false);
  }

  /** SIGKILL, keeping the data dir (for {@link #restart()}). */
  void kill() throws Exception {
    process.destroyForcibly().waitFor();
  }

  private ServerProcess(Path dataDir, String listen, boolean withPki, String... extra) throws Exception {
    this.dataDir = dataDir;
    pki = withPki ? makePki(dataDir.resolve("pki")) : null;
    java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of(binary().toString(), "serve",
        "--listen", listen, "--admin-listen", "127.0.0.1:0",
        "--data-dir", withPki ? dataDir.resolve("data").toString() : dataDir.toString()));
    for (String a : extra) {
      args.add(pki == null || a.startsWith("--") ? a : pki.resolve(a).toString());
    }
    ProcessBuilder pb = new ProcessBuilder(args);
    pb.environment().put("RUST_LOG", "warn");
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    process = pb.start();
    BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    Thread reader = new Thread(() -> {
      try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = r.readLine()) != null) {
          lines.add(line);
        }
      } catch (IOException e) {
        // the server ended
      }
    }, "server-stdout");
    reader.setDaemon(true);
    reader.start();
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (true) {
      String line = lines.poll(end - System.nanoTime(), TimeUnit.NANOSECONDS);
      if (line == null) {
        process.destroyForcibly();
        throw new IllegalStateException("server did not print its listening line");
      }
      Matcher m = LISTENING.matcher(line);
      if (m.matches()) {
        target = m.group(1);
        admin = m.group(2);
        return;
      }
    }
  }

  /** Sends a signal (STOP, CONT, TERM...) with the shell's kill builtin. */
  /** Sends {@code sig} ("STOP", "CONT"...); STOP returns once the server has stopped ({@link #waitStopped}). */
  void signal(String sig) throws Exception {
    Process p = new ProcessBuilder("sh", "-c", "kill -" + sig + " " + process.pid()).inheritIO().start();
    if (p.waitFor() != 0) {
      throw new IllegalStateException("kill -" + sig + " failed");
    }
    if (sig.equals("STOP")) {
      waitStopped(process.pid());
    }
  }

  /**
   * Waits until every thread of process {@code pid} is stopped, as
   * /proc/PID/task/{@literal *}/stat says (state T), or the process is gone.
   * kill(2) returns once SIGSTOP is sent, not once it has taken effect: the
   * process stops when one of its threads takes the signal, and on a loaded
   * machine another of its threads may answer one more call first. A test
   * that pauses the server means "no answer from now on".
   */
  static void waitStopped(long pid) throws Exception {
    Path tasks = Paths.get("/proc", Long.toString(pid), "task");
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (true) {
      java.util.List<String> states = new java.util.ArrayList<>();
      try (java.util.stream.Stream<Path> ts = Files.list(tasks)) {
        for (Path t : (Iterable<Path>) ts::iterator) {
          try {
            String stat = Files.readString(t.resolve("stat"));
            String[] rest = stat.substring(stat.lastIndexOf(')') + 1).trim().split("\\s+");
            states.add(rest[0]);
          } catch (IOException e) {
            // the thread ended
          }
        }
      } catch (IOException e) {
        return; // gone
      }
      if (states.stream().allMatch(s -> s.equals("T") || s.equals("t") || s.equals("Z") || s.equals("X"))) {
        return;
      }
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("process " + pid + " did not stop within 30 s of SIGSTOP: its threads' states " + states);
      }
      Thread.sleep(2);
    }
  }

  /**
   * One client for every scrape, whose pool keeps a connection per admin
   * port. A client per scrape kept a connection open each until it was
   * collected: a test polling every 20 ms filled the admin port's 256
   * connections, and its scrapes were refused.
   */
  private static final HttpClient METRICS_CLIENT =
      HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

  /**
   * The text of /metrics, over plain HTTP/1.1 (no h2c upgrade). A request
   * the admin port closed without an answer (a loaded machine, a
   * connection the server let go) is asked again, within {@link #PATIENCE}:
   * a poll waits for a state, and one lost answer is not one.
   */
  String metricsText() throws Exception {
    HttpClient client = METRICS_CLIENT;
    HttpRequest req = HttpRequest.newBuilder(URI.create("http://" + admin + "/metrics"))
        .timeout(Duration.ofSeconds(10)).build();
    long deadline = System.nanoTime() + PATIENCE.toNanos();
    while (true) {
      try {
        return client.send(req, HttpResponse.BodyHandlers.ofString()).body();
      } catch (java.io.IOException e) {
        if (System.nanoTime() > deadline) {
          throw e;
        }
        Thread.sleep(50);
      }
    }
  }

  /** The sum of a metric's samples on /metrics. */
  double metric(String name) throws Exception {
    double total = 0;
    for (String line : metricsText().split("\n")) {
      if (line.startsWith(name + " ") || line.startsWith(name + "{")) {
        total += Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
      }
    }
    return total;
  }

  /**
   * How long a test waits for a state it expects: far longer than a stall
   * of a loaded machine, so that only a state that never comes fails a
   * test. Waiting costs only the time the state takes.
   */
  static final Duration PATIENCE = Duration.ofSeconds(30);

  /** The sum of a metric's samples whose labels include {@code label} (such as {@code method="GetLease"}). */
  double metric(String name, String label) throws Exception {
    double total = 0;
    for (String line : metricsText().split("\n")) {
      if (line.startsWith(name + "{") && line.substring(0, line.indexOf('}')).contains(label)) {
        total += Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
      }
    }
    return total;
  }

  /** Waits until the samples of {@code name} with {@code label} sum to more than {@code n}. */
  void waitMetricAbove(String name, String label, double n, String what) throws Exception {
    waitUntil(PATIENCE, what, () -> {
      try {
        return metric(name, label) > n;
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
  }

  /** Waits until at least {@code n} Acquires are queued on the server. */
  void waitWaiters(int n) throws Exception {
    waitUntil(PATIENCE, n + " queued acquire(s)", () -> {
      try {
        return metric("leasehold_waiting_acquires") >= n;
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
  }

  /**
   * Waits until the server has renewed at least {@code n} leases (all jobs),
   * as its {@code leasehold_renewals_total} counter counts them, checking
   * {@code meanwhile} at every look.
   */
  void waitRenewals(double n, Runnable meanwhile) throws Exception {
    waitUntil(PATIENCE.multipliedBy(2), n + " renewal(s)", () -> {
      meanwhile.run();
      try {
        return metric("leasehold_renewals_total") >= n;
      } catch (Exception e) {
        throw new RuntimeException(e);
      }
    });
  }

  /**
   * The job's history of leaders, newest first (one page), through the
   * generated stub, not the client under test ({@link Client#history} has
   * tests of its own).
   */
  java.util.List<dev.leasehold.v1.Tenure> history(String job) throws InterruptedException {
    io.grpc.ManagedChannel channel = io.grpc.ManagedChannelBuilder.forTarget(target).usePlaintext().build();
    try {
      return dev.leasehold.v1.LeasesGrpc.newBlockingStub(channel).withDeadlineAfter(10, TimeUnit.SECONDS)
          .getHistory(dev.leasehold.v1.GetHistoryRequest.newBuilder().setJob(job).build()).getTenuresList();
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /** How the tenure of {@code token} ended, in the job's history (null: not in it). */
  dev.leasehold.v1.Tenure.End tenureEnd(String job, long token) throws InterruptedException {
    for (dev.leasehold.v1.Tenure t : history(job)) {
      if (t.getToken() == token) {
        return t.getEnd();
      }
    }
    return null;
  }

  /** Bounded polling for an external state change. */
  static void waitUntil(Duration timeout, String what, BooleanSupplier pred) throws InterruptedException {
    long end = System.nanoTime() + timeout.toNanos();
    while (!pred.getAsBoolean()) {
      if (System.nanoTime() - end > 0) {
        throw new AssertionError("timed out after " + timeout + " waiting for " + what);
      }
      Thread.sleep(20);
    }
  }

  @Override
  public void close() throws Exception {
    if (process.isAlive()) {
      try {
        signal("CONT"); // in case a test left it stopped
      } catch (IllegalStateException e) {
        // it exited meanwhile (a test sent SIGTERM)
      }
      process.destroy(); // SIGTERM
      if (!process.waitFor(15, TimeUnit.SECONDS)) {
        process.destroyForcibly().waitFor();
      }
    }
    if (!Files.exists(dataDir)) {
      return;
    }
    try (var walk = Files.walk(dataDir)) {
      walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }
}
