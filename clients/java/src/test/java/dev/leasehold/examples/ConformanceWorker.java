package dev.leasehold.examples;

import dev.leasehold.client.Acquired;
import dev.leasehold.client.Client;
import dev.leasehold.client.Elector;
import dev.leasehold.client.ElectorSet;
import dev.leasehold.client.HistoryPage;
import dev.leasehold.client.JobInUseException;
import dev.leasehold.client.Lease;
import dev.leasehold.client.Lock;
import dev.leasehold.client.Observation;
import dev.leasehold.client.Security;
import dev.leasehold.client.Shard;
import dev.leasehold.client.ShardListener;
import dev.leasehold.client.ShardMember;
import dev.leasehold.client.StreamWrite;
import dev.leasehold.client.WriteOutcome;
import dev.leasehold.client.WriteStream;
import dev.leasehold.client.FencedException;
import dev.leasehold.client.InvalidArgumentException;
import dev.leasehold.client.LeaseLostException;
import dev.leasehold.client.LeaseholdException;
import dev.leasehold.client.NoSuccessorException;
import dev.leasehold.client.UnknownTokenException;
import dev.leasehold.client.Waiter;
import dev.leasehold.client.Waiters;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;

/**
 * The conformance worker for Java (clients/conformance/README.md has the
 * protocol): one Elector for one job, driven over stdin, reporting on
 * stdout. Also a complete example of a worker: lead, write fenced by the
 * token, release on SIGTERM (in a shutdown hook).
 *
 * <pre>java -cp ... dev.leasehold.examples.ConformanceWorker --server 127.0.0.1:50051 --job j --name w1 --ttl-ms 1000 [--bind] [--preferred] [--yield] [--ca FILE] [--token SECRET] [--value V] [--slots N]</pre>
 *
 * <p>{@code --bind} builds the worker's elector with
 * {@code bindToStream(true)}, {@code --preferred} with
 * {@code preferred(true)}, {@code --yield} with
 * {@code yieldToPreferred(true)} (the twins have none of them).
 * {@code --ca FILE} connects with TLS trusting that CA, {@code --token
 * SECRET} sends it as a bearer token on every call (one client, shared by
 * everything the worker makes). {@code --value V} makes the elector
 * publish V (UTF-8) with its grants ({@code Elector.Builder.value}):
 * {@code set-value <v>} changes it ({@code setValue}, sent with the next
 * renewal), {@code leader} reads the job's leader and its value
 * ({@code leader()}), and {@code waiters <job>} lists a job's waiting
 * candidates in line order ({@code Client.listWaiters}).
 *
 * <p>{@code --slots N} makes the elector campaign for a slot of a counted
 * lease with N slots ({@code Elector.Builder.slots}): its
 * {@code elected token=<T>} line then ends with
 * {@code  job=<slot job> slot=<k>}, and {@code write <value>} writes with
 * the job its last lease was on, the slot's job. {@code acquire-slots <job>
 * <n>} is a one-shot unary Acquire without waiting, as a fresh holder
 * {@code <name>@<new uuid>} with the worker's TTL and {@code slots = n}
 * ({@code Client.acquire(job, holder, ttl, wait, slots)}), answered
 * {@code acquire-slots ok job=<lease job> slot=<k> token=<T>},
 * {@code acquire-slots busy}, {@code acquire-slots invalid field=<field>}
 * or {@code acquire-slots error <msg>}; the lease it gets is left to
 * expire.
 *
 * <p>Besides its elector, the worker takes a lock ({@code lock},
 * {@code lock-write} through a {@link WriteStream}, {@code unlock}),
 * follows a job with an elector's {@code onNewLeader} and an observation
 * ({@code follow}, {@code follow-stop}), leads many jobs with an
 * {@link ElectorSet} ({@code fleet}, {@code fleet-stop}), and reads a
 * job's history ({@code history}) or deletes it ({@code delete-job}).
 *
 * <p>It is also a shard member, one at a time ({@link ShardMember} with its
 * run helper): {@code shards <group> <n>} joins {@code <group>} of
 * {@code <n>} shards as {@code --name}, with the worker's TTL and a revoke
 * timeout of the TTL, the work of each shard waiting until cancelled. It
 * prints {@code shards member <id>} once joined, then
 * {@code shards assigned <k> token=<T>} per assignment,
 * {@code shards revoked <k>} per revoke (once the shard's work was
 * cancelled, just before the ack) and {@code shards lost <k> token=<T>}
 * per loss; a refused join prints {@code shards invalid field=<f>} or
 * {@code shards error <msg>}. {@code shards-write <k> <value>} writes key
 * {@code status} under {@code <group>/<k>} with the token it last owned
 * shard k with (even after it moved): {@code shards-write ok version=<V>},
 * {@code shards-write fenced current=<T>}, {@code shards-write error
 * never-owned} or {@code shards-write error <msg>}. {@code shards-stop}
 * leaves the group ({@code shards-stop done}); so do {@code quit} and
 * SIGTERM.
 */
public final class ConformanceWorker {
  private ConformanceWorker() {}

  static synchronized void say(String line) {
    System.out.println(line);
    System.out.flush();
  }

  public static void main(String[] argv) throws Exception {
    // The tests' SLF4J binding (slf4j-simple) logs the client at debug; the
    // scenario reads stdout only, and wants stderr quiet but for errors.
    System.setProperty("org.slf4j.simpleLogger.log.dev.leasehold.client", "error");
    Map<String, String> args = new HashMap<>();
    boolean bind = false;
    boolean preferred = false;
    boolean yield = false;
    for (int i = 0; i < argv.length; i++) {
      String name = argv[i].replaceFirst("^--", "");
      // Flags, without a value.
      if (name.equals("bind")) {
        bind = true;
      } else if (name.equals("preferred")) {
        preferred = true;
      } else if (name.equals("yield")) {
        yield = true;
      } else if (i + 1 < argv.length) {
        args.put(name, argv[++i]);
      }
    }
    String job = args.get("job");
    Security.Builder security = Security.builder();
    if (args.containsKey("ca")) {
      security.caFile(Path.of(args.get("ca")));
    }
    if (args.containsKey("token")) {
      security.token(args.get("token"));
    }
    Client client = Client.connect(args.getOrDefault("server", Client.DEFAULT_TARGET), security.build());
    String name = args.getOrDefault("name", "worker");
    Duration ttl = Duration.ofMillis(Long.parseLong(args.getOrDefault("ttl-ms", "1000")));
    Extras extras = new Extras(client, name, ttl);
    int slots = Integer.parseInt(args.getOrDefault("slots", "0"));
    // The token we last led with, and the job that lease was on (a counted
    // lease's slot job), kept after losing: set together, read together.
    AtomicReference<Led> last = new AtomicReference<>(new Led(job, 0));
    Elector elector = Elector.builder(client, job, args.getOrDefault("name", "worker"))
        .ttl(Duration.ofMillis(Long.parseLong(args.getOrDefault("ttl-ms", "1000"))))
        .value(args.get("value")) // where to reach this worker when it leads; null: none
        .slots(slots)
        .onElected((t, grant) -> {
          last.set(new Led(grant.job(), t));
          say("elected token=" + Long.toUnsignedString(t)
              + (grant.isSlot() ? " job=" + grant.job() + " slot=" + grant.slot() : ""));
        })
        .onLost(t -> say("lost token=" + Long.toUnsignedString(t)))
        .bindToStream(bind)
        .preferred(preferred)
        .yieldToPreferred(yield)
        .build();
    say("holder " + elector.holder());

    // Two more electors, one name, one process (the "twin" command).
    List<Elector> twins = new ArrayList<>();
    List<AtomicLong> twinTokens = new ArrayList<>();

    // SIGTERM runs the shutdown hooks: resign (release), then exit 0.
    Object once = new Object();
    boolean[] done = {false};
    Runnable shutdown = () -> {
      synchronized (once) {
        if (done[0]) {
          return;
        }
        done[0] = true;
      }
      synchronized (twins) {
        twins.forEach(Elector::close);
      }
      extras.close(); // the lock, the follow elector, the fleet, the shard member
      elector.close(); // releases the lease if held
      say("bye");
      client.close();
    };
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      shutdown.run();
      Runtime.getRuntime().halt(0); // a graceful shutdown is a success
    }, "shutdown"));
    elector.start();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String[] parts = line.trim().split(" ", 2);
      String cmd = parts[0];
      String arg = parts.length > 1 ? parts[1] : "";
      if (cmd.equals("quit")) {
        break;
      } else if (cmd.equals("write")) {
        Led led = last.get();
        say(write(client, led.job(), led.token(), arg));
      } else if (cmd.equals("bad")) {
        say("bad " + arg + " " + bad(client, job, elector.holder(), last.get().token(), arg));
      } else if (cmd.equals("acquire-slots")) {
        say(acquireSlots(client, name, ttl, arg));
      } else if (cmd.equals("set-value")) {
        // At once: the value goes with the elector's next renewal.
        elector.setValue(arg);
        say("set-value done");
      } else if (cmd.equals("leader")) {
        say(leader(elector));
      } else if (cmd.equals("waiters")) {
        say(waiters(client, arg));
      } else if (cmd.equals("transfer")) {
        say(transfer(elector, null));
      } else if (cmd.equals("transfer-to")) {
        say(transfer(elector, arg));
      } else if (cmd.equals("twin")) {
        synchronized (twins) {
          if (twins.isEmpty()) {
            startTwins(client, arg, args.getOrDefault("name", "worker"),
                Duration.ofMillis(Long.parseLong(args.getOrDefault("ttl-ms", "1000"))), twins, twinTokens);
          }
        }
      } else if (cmd.equals("twin-write")) {
        String[] iv = arg.split(" ", 2);
        int i = Integer.parseInt(iv[0]);
        say("twin-" + write(client, twins.get(i).job(), twinTokens.get(i).get(), iv.length > 1 ? iv[1] : ""));
      } else if (cmd.equals("twin-stop")) {
        twins.get(Integer.parseInt(arg)).close();
        say("twin-stop done");
      } else if (extras.handle(cmd, arg)) {
        // done
      } else if (!cmd.isEmpty()) {
        say("error unknown command " + cmd);
      }
    }
    shutdown.run();
    System.exit(0);
  }

  /**
   * The lock, follow, fleet, history and delete-job commands. Each answer
   * is one line; one lock, one follow and one fleet at a time.
   */
  static final class Extras {
    private final Client client;
    private final String name;
    private final Duration ttl;
    /** The lock being taken or held, and its job and last token (kept after unlock). */
    private CompletableFuture<Lock> lock;
    private String lockJob;
    private long lockToken;
    private WriteStream stream;
    private Elector follow;
    private Observation observation;
    private ElectorSet fleet;
    /** The shard member, its group, and the token each shard was last owned with (kept after it moved). */
    private ShardMember shards;
    private String shardGroup;
    private final Map<Integer, Long> shardTokens = new ConcurrentHashMap<>();
    /** Set while the member leaves: close() reports its shards lost, which the protocol does not print. */
    private volatile boolean shardsLeaving;

    Extras(Client client, String name, Duration ttl) {
      this.client = client;
      this.name = name;
      this.ttl = ttl;
    }

    synchronized boolean handle(String cmd, String arg) {
      switch (cmd) {
        case "lock" -> lock(arg);
        case "lock-write" -> say(lockWrite(arg));
        case "unlock" -> {
          unlock();
          say("unlock done");
        }
        case "follow" -> follow(arg);
        case "follow-stop" -> {
          stopFollowing();
          say("follow-stop done");
        }
        case "fleet" -> fleet(arg);
        case "fleet-stop" -> {
          stopFleet();
          say("fleet-stop done");
        }
        case "shards" -> shards(arg);
        case "shards-write" -> say(shardsWrite(arg));
        case "shards-stop" -> {
          stopShards();
          say("shards-stop done");
        }
        case "history" -> say(history(arg));
        case "delete-job" -> say(deleteJob(arg));
        default -> {
          return false;
        }
      }
      return true;
    }

    /** Takes the lock in the async idiom (lockAsync), waiting as long as it takes. */
    private void lock(String job) {
      if (lock != null) {
        say("lock error already locked");
        return;
      }
      lockJob = job;
      lockToken = 0;
      lock = client.lockAsync(job, ttl, null, name);
      lock.whenComplete((l, e) -> {
        if (e != null) {
          if (!(e instanceof java.util.concurrent.CancellationException)) {
            say("lock error " + (e instanceof java.util.concurrent.CompletionException ? e.getCause() : e));
          }
          return;
        }
        synchronized (this) {
          lockToken = l.token();
        }
        say("lock held " + job + " token=" + Long.toUnsignedString(l.token()) + " holder=" + l.holder());
        l.onLost(() -> say("lock lost " + job + " token=" + Long.toUnsignedString(l.token())));
      });
    }

    /** Writes with the lock's (last) token through the worker's WriteStream. */
    private String lockWrite(String value) {
      if (lockToken == 0) {
        return "lock-write error never-locked";
      }
      try {
        if (stream == null) {
          stream = client.writeStream();
        }
        WriteOutcome o = stream.write(List.of(StreamWrite.put(lockJob, lockToken, "status", value))).get(0);
        return switch (o.kind()) {
          case WRITTEN -> "lock-write ok version=" + Long.toUnsignedString(o.version());
          case FENCED -> "lock-write fenced current=" + Long.toUnsignedString(o.currentToken());
          default -> "lock-write error " + o.kind() + " " + o.message();
        };
      } catch (LeaseholdException e) {
        stream = null; // broken: the next write opens another
        return "lock-write error " + e;
      }
    }

    private void unlock() {
      CompletableFuture<Lock> l = lock;
      lock = null;
      if (l == null) {
        return;
      }
      if (!l.cancel(true)) {
        Lock held = l.getNow(null);
        if (held != null) {
          held.close(); // releases the lease if still held
        }
      }
    }

    /** {@code <job> [<value>]}: the follow elector publishes the value, when given. */
    private void follow(String arg) {
      if (follow != null) {
        say("follow error already following");
        return;
      }
      String[] jv = arg.split(" ", 2);
      String job = jv[0];
      follow = Elector.builder(client, job, name).ttl(ttl)
          .value(jv.length > 1 ? jv[1] : null)
          .onNewLeader((h, t, v) -> say("newleader " + job + " holder=" + h + " token=" + Long.toUnsignedString(t)
              + valueSuffix(v)))
          .onElected(t -> say("follow elected " + job + " token=" + Long.toUnsignedString(t)))
          .onLost(t -> say("follow lost " + job + " token=" + Long.toUnsignedString(t)))
          .build();
      say("follow holder " + follow.holder());
      // Every event, VALUE_CHANGED included (same holder and token, a new value).
      observation = client.observe(job, e -> say("observe " + job + " holder="
          + (e.lease().holder() == null ? "-" : e.lease().holder()) + " token=" + Long.toUnsignedString(e.lease().token())
          + valueSuffix(e.lease().value())));
      follow.start();
    }

    private void stopFollowing() {
      if (follow != null) {
        follow.close();
        follow = null;
      }
      if (observation != null) {
        observation.close();
        observation = null;
      }
    }

    private void fleet(String arg) {
      if (fleet != null) {
        say("fleet error already running");
        return;
      }
      String[] np = arg.split(" ", 2);
      int n = Integer.parseInt(np[0]);
      String prefix = np.length > 1 ? np[1] : "";
      fleet = ElectorSet.builder(client, name).ttl(ttl).listener(new ElectorSet.Listener() {
        @Override
        public void onElected(String job, long token) {
          say("fleet elected " + job + " token=" + Long.toUnsignedString(token));
        }

        @Override
        public void onLost(String job, long token) {
          say("fleet lost " + job + " token=" + Long.toUnsignedString(token));
        }
      }).start();
      say("fleet holder " + fleet.holder());
      for (int i = 0; i < n; i++) {
        fleet.campaign(prefix + i);
      }
    }

    private void stopFleet() {
      if (fleet != null) {
        fleet.close(); // releases every lease held
        fleet = null;
      }
    }

    /** {@code <group> <n>}: joins with the run helper; the work of each shard waits until cancelled. */
    private void shards(String arg) {
      if (shards != null) {
        say("shards error already a member");
        return;
      }
      String[] gn = arg.trim().split("\\s+");
      int n;
      try {
        n = Integer.parseInt(gn.length > 1 ? gn[1] : "");
      } catch (NumberFormatException e) {
        say("shards error usage: shards <group> <n>");
        return;
      }
      String group = gn[0];
      // Events may come before join() returns: they wait for the member line.
      CountDownLatch joined = new CountDownLatch(1);
      ShardListener listener = new ShardListener() {
        @Override
        public void onAssigned(Shard s) {
          awaitQuietly(joined);
          shardTokens.put(s.shard(), s.token());
          say("shards assigned " + s.shard() + " token=" + Long.toUnsignedString(s.token()));
        }

        @Override
        public void onRevoked(Shard s) {
          // The run helper calls this once the shard's work has ended; the ack follows.
          awaitQuietly(joined);
          say("shards revoked " + s.shard());
        }

        @Override
        public void onLost(Shard s) {
          awaitQuietly(joined);
          if (!shardsLeaving) {
            say("shards lost " + s.shard() + " token=" + Long.toUnsignedString(s.token()));
          }
        }

        @Override
        public void onError(LeaseholdException e) {
          awaitQuietly(joined);
          say("shards error " + e);
        }
      };
      try {
        shards = ShardMember.builder(client, group, name, n).ttl(ttl).revokeTimeout(ttl).listener(listener)
            .work((shard, cancelled) -> cancelled.await())
            .join();
        shardGroup = group;
        shardsLeaving = false;
        say("shards member " + shards.member());
      } catch (InvalidArgumentException e) {
        say("shards invalid field=" + e.field());
      } catch (LeaseholdException e) {
        say("shards error " + e);
      } finally {
        joined.countDown();
      }
    }

    /** {@code <k> <value>}: a fenced write with the token shard k was last owned with. */
    private String shardsWrite(String arg) {
      String[] kv = arg.split(" ", 2);
      Long token;
      try {
        token = shardTokens.get(Integer.parseInt(kv[0].trim()));
      } catch (NumberFormatException e) {
        return "shards-write error usage: shards-write <k> <value>";
      }
      if (token == null || shardGroup == null) {
        return "shards-write error never-owned";
      }
      try {
        return "shards-write ok version=" + Long.toUnsignedString(
            client.checkedWrite(shardGroup + "/" + kv[0].trim(), token, "status", kv.length > 1 ? kv[1] : ""));
      } catch (FencedException e) {
        return "shards-write fenced current=" + Long.toUnsignedString(e.currentToken().orElse(0));
      } catch (LeaseholdException e) {
        return "shards-write error " + e;
      }
    }

    /** Leaves the group: the work stops, then the shards go to the others at once. */
    private void stopShards() {
      if (shards != null) {
        shardsLeaving = true;
        shards.close();
        shards = null;
      }
    }

    private static void awaitQuietly(CountDownLatch latch) {
      boolean interrupted = false;
      while (true) {
        try {
          latch.await();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }

    private String history(String job) {
      try {
        HistoryPage page = client.history(job, 0, "");
        return "history " + job + " tokens=" + page.tenures().stream()
            .map(t -> Long.toUnsignedString(t.token())).collect(Collectors.joining(","));
      } catch (LeaseholdException e) {
        return "history error " + e;
      }
    }

    private String deleteJob(String job) {
      try {
        return client.deleteJob(job) ? "delete-job deleted" : "delete-job absent";
      } catch (JobInUseException e) {
        return "delete-job in-use";
      } catch (LeaseholdException e) {
        return "delete-job error " + e;
      }
    }

    /** Resigns the lock, the follow elector and the fleet, and leaves the shard group (shutdown). */
    synchronized void close() {
      unlock();
      stopFollowing();
      stopFleet();
      stopShards();
      if (stream != null) {
        stream.close();
        stream = null;
      }
    }
  }

  /** The lease the elector last led with: its job (a counted lease's slot job) and token. */
  record Led(String job, long token) {}

  /**
   * {@code <job> <n>}: one unary Acquire of a slot of {@code job} counted
   * with {@code n} slots, without waiting, as a fresh holder; the lease is
   * left to expire.
   */
  static String acquireSlots(Client client, String name, Duration ttl, String arg) {
    String[] jn = arg.split(" ", 2);
    if (jn.length < 2) {
      return "acquire-slots error usage: acquire-slots <job> <n>";
    }
    try {
      Acquired a = client.acquire(jn[0], name + "@" + UUID.randomUUID(), ttl, Duration.ZERO,
          Integer.parseInt(jn[1].trim()));
      if (!a.acquired()) {
        return "acquire-slots busy";
      }
      Lease l = a.lease();
      return "acquire-slots ok job=" + l.job() + " slot=" + l.slot() + " token=" + Long.toUnsignedString(l.token());
    } catch (InvalidArgumentException e) {
      return "acquire-slots invalid field=" + e.field();
    } catch (LeaseholdException | NumberFormatException e) {
      return "acquire-slots error " + e;
    }
  }

  /** " value=<v>" (UTF-8) when {@code value} is not empty; "" when it is, so lines stay as they were. */
  static String valueSuffix(byte[] value) {
    return value.length == 0 ? "" : " value=" + new String(value, StandardCharsets.UTF_8);
  }

  /** The job's leader as the elector reads it ({@code leader()}): {@code -} for no holder or no value. */
  static String leader(Elector elector) {
    try {
      Lease l = elector.leader();
      return "leader holder=" + (l.isHeld() ? l.holder() : "-") + " token=" + Long.toUnsignedString(l.token())
          + " value=" + (l.hasValue() ? l.valueUtf8() : "-");
    } catch (LeaseholdException e) {
      return "leader error " + e;
    }
  }

  /** The job's waiting candidates, in line order ({@code listWaiters}). */
  static String waiters(Client client, String job) {
    try {
      Waiters w = client.listWaiters(job, 0);
      StringBuilder b = new StringBuilder("waiters n=").append(Integer.toUnsignedString(w.waiting()));
      for (Waiter x : w.waiters()) {
        b.append(' ').append(x.holder());
      }
      return b.toString();
    } catch (LeaseholdException e) {
      return "waiters error " + e;
    }
  }

  /** Two electors with one name for {@code job}: each is its own holder, so at most one leads. */
  static void startTwins(Client client, String job, String name, Duration ttl, List<Elector> twins,
      List<AtomicLong> tokens) {
    for (int i = 0; i < 2; i++) {
      int n = i;
      AtomicLong last = new AtomicLong(); // the token it last led with
      tokens.add(last);
      twins.add(Elector.builder(client, job, name).ttl(ttl)
          .onElected(t -> {
            last.set(t);
            say("twin elected " + n + " token=" + Long.toUnsignedString(t));
          })
          .onLost(t -> say("twin lost " + n + " token=" + Long.toUnsignedString(t)))
          .build());
      say("twin holder " + i + " " + twins.get(i).holder());
    }
    twins.forEach(Elector::start);
  }

  /**
   * Hands the elector's lead to the first waiter ({@code to} null) or to
   * the waiting holder {@code to}; the elector reports the loss itself
   * ({@code lost token=N}).
   */
  static String transfer(Elector elector, String to) {
    try {
      return "transfer ok token=" + Long.toUnsignedString(elector.transfer(to).token());
    } catch (IllegalStateException e) {
      return "transfer not-leader";
    } catch (NoSuccessorException e) {
      return "transfer no-successor";
    } catch (LeaseLostException e) {
      return "transfer lost";
    } catch (LeaseholdException e) {
      return "transfer error " + e;
    }
  }

  static String write(Client client, String job, long token, String value) {
    // No "am I still the leader?" check first: it could be stale by the
    // time the write lands. The token goes with the write; the server decides.
    if (token == 0) {
      return "write error never-led";
    }
    try {
      return "write ok version=" + client.checkedWrite(job, token, "status", value);
    } catch (FencedException e) {
      return "write fenced current=" + e.currentToken().orElse(0);
    } catch (LeaseholdException e) {
      return "write error " + e;
    }
  }

  static String bad(Client client, String job, String holder, long token, String which) {
    try {
      switch (which) {
        case "job" -> client.acquire("", holder, Duration.ofSeconds(1));
        case "ttl" -> client.acquire(job, holder, Duration.ofMillis(1));
        case "key" -> client.checkedWrite(job, token == 0 ? 1 : token, new byte[0], new byte[] {'x'});
        case "token" -> client.checkedWrite(job, 1L << 62, "status", "x");
        default -> {
          return "error unknown case";
        }
      }
      return "accepted";
    } catch (UnknownTokenException e) {
      return "unknown-token current=" + e.currentToken().orElse(0);
    } catch (InvalidArgumentException e) {
      return "invalid field=" + e.field();
    } catch (LeaseholdException e) {
      return "other " + e;
    }
  }
}
