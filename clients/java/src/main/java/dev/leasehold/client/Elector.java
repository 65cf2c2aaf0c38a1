package dev.leasehold.client;

import com.google.common.util.concurrent.ListenableFuture;
import dev.leasehold.v1.AcquireResponse;
import dev.leasehold.v1.RenewResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Objects;
import java.util.OptionalLong;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongConsumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Campaigns for one job on a background thread: a waiting Acquire (so a
 * release hands over at once), a renewal every ttl/3, and a step-down no
 * later than its own deadline: the instant the last successful grant or
 * renewal was <em>sent</em>, plus the TTL. The server counts the TTL from
 * when it <em>received</em> that request, later, so the elector believes it
 * has lost before the server can give the lease away, even when the server
 * cannot be reached. After a loss it campaigns again; {@link #close()}
 * stops it and releases the lease (bounded).
 *
 * <p>What no elector can notice is its own process being paused (GC,
 * SIGSTOP): carry the token into every write, so a stale leader is fenced.
 * {@link #token()} checks the deadline itself, so it turns empty on time
 * even if the elector's thread is held up.
 *
 * <pre>{@code
 * try (Elector elector = Elector.builder(client, "bridge_health", "bridge")
 *     .ttl(Duration.ofSeconds(10))
 *     .onElected(token -> log.info("leading with " + token))
 *     .onLost(token -> stopWork())
 *     .start()) {
 *   long token = elector.awaitElected(Duration.ofMinutes(5)).orElseThrow();
 *   client.checkedWrite("bridge_health", token, "status", "ok");
 * } // close(): releases the lease
 * }</pre>
 *
 * <p>Callbacks run in order on one callback thread, so a slow callback
 * cannot delay a renewal.
 *
 * <p>Each elector is its own holder, {@code name@uuid} with a UUID made for
 * it, so two electors for one job in one process compete as two processes
 * would.
 *
 * <p>Failed calls are retried with jittered exponential backoff: a campaign
 * from ttl/10 (10 to 100 ms) doubling up to 1 s, a renewal from ttl/10
 * doubling up to 1 s but never waiting past half the time left to its
 * deadline. Retry warnings come at most one every 5 s per elector, with the
 * count of those suppressed; every failed attempt is logged at DEBUG. The
 * logger is SLF4J's {@code dev.leasehold.client.Elector}.
 *
 * <p>An empty job or name, or a TTL that is not positive, is refused with
 * {@link IllegalArgumentException} by the builder. A campaign the server
 * refuses with an error retrying cannot fix ({@link InvalidArgumentException},
 * such as a TTL over its {@code --max-ttl} or a job over
 * {@code --max-name-bytes}; {@link UnauthenticatedException};
 * {@link PermissionDeniedException}) is not retried: the elector stops,
 * {@link #error()} holds the exception and {@link #awaitElected} throws it.
 *
 * <p>{@link #transfer(String)} hands the lead to a waiting elector at once
 * (the successor's token is ours plus one, and the job is never free in
 * between); the elector reports the end of its lead as a loss and campaigns
 * again, behind the successor. {@link Builder#bindToStream(boolean)} binds
 * every grant of the campaign to the client's connection, so that the
 * server releases it at once when this process dies (its connection
 * closes), instead of waiting out the TTL.
 *
 * <p>{@link Builder#preferred(boolean)} campaigns as a preferred candidate:
 * queued ahead of the campaigners that are not, and a leader that is not
 * preferred is told that it waits. {@link Builder#yieldToPreferred(boolean)}
 * makes this elector, told so at a renewal, hand its lead to the first in
 * line right after that renewal (as {@link #transfer()} does), then
 * campaign again behind it. Nothing is taken from a leader that does not
 * yield: it leads on until it releases, transfers or loses its lease.
 *
 * <p>{@link Builder#value(byte[])} publishes a value with every grant of
 * the campaign ({@link Lease#value()}: where to reach the leader, say its
 * address), and {@link #setValue(byte[])} changes it: the new value goes
 * with the next renewal (or the next Acquire while not leading). Followers
 * read the leader's value with {@link #leader()}, or hear it in
 * {@code onNewLeader} and {@link Client#observe}. <b>The value is advisory:
 * the token fences, not the value.</b>
 *
 * <p>{@link Builder#slots(int)} campaigns for a slot of a counted lease (a
 * semaphore): up to N electors of the job lead at once, each in its own
 * slot, a job of its own ({@code "{job}#{k}"}) with its own token. While
 * leading, {@link #leaseJob()} names the slot's job, which the elector
 * renews, releases and transfers, and which writes fenced by its token
 * must name; {@link #slot()} is k. A campaign after a loss asks for any
 * slot again.
 */
public final class Elector implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(Elector.class);

  private final Client client;
  private final String job;
  private final String holder;
  private final Duration ttl;
  private final boolean bindToStream;
  private final boolean preferred;
  private final boolean yieldToPreferred;
  private final int slots;
  private final ElectedListener onElected;
  private final LongConsumer onLost;
  private final NewLeaderValueListener onNewLeader;

  private final ReentrantLock lock = new ReentrantLock();
  private final Condition changed = lock.newCondition();
  private boolean stopped;
  private boolean finished;
  private LeaseholdException refusal;
  private long token; // 0: not leading
  private String proof; // the proof of the grant of token; null when not leading, or the server signs nothing
  private long deadline; // System.nanoTime() when leading
  private long transferring; // the token a transfer() is handing over; 0: none
  /**
   * The grant of the campaign's last Acquire: the job it is on (a counted
   * lease's slot job, else {@link #job}), its slot and the count (0 when
   * not counted). Set before the lead starts, kept after it ends.
   */
  private String grantJob;
  private int grantSlot;
  private int grantSlots;
  /** The value to publish (never null; empty: none), and its version: setValue() counts it up. */
  private byte[] value;
  private long valueVersion;
  /**
   * The version of the value the server is known to hold for our lease:
   * that of the Acquire that granted it, or of a renewal that carried one.
   * Below {@link #valueVersion}: the renewals carry the value until one
   * succeeds (unset, a renewal keeps the server's).
   */
  private long valuePublished;
  private Thread thread;
  private final ExecutorService callbacks;
  private final Retry.Warnings warnings = new Retry.Warnings();
  /** The highest token reported to onNewLeader (unsigned); 0: none yet. */
  private long leaderReported;
  /** The thread that keeps the job's WatchLease open for onNewLeader; null without it. */
  private Thread watcher;
  /** The watcher's open observation, closed by close(). */
  private Observation watching;

  /**
   * Hears that the elector leads ({@link Builder#onElected(ElectedListener)}),
   * with the grant.
   */
  @FunctionalInterface
  public interface ElectedListener {
    /**
     * We lead with {@code token} (unsigned), granted as {@code grant} says:
     * its {@link Lease#job()} is the job our lease is on, which writes
     * fenced by the token name (for a counted lease, {@link Builder#slots},
     * the slot's job {@code "{job}#{slot}"}, with {@link Lease#slot()} and
     * {@link Lease#slots()}; else the elector's job), and its
     * {@link Lease#proof()} the grant's proof. Called on the elector's
     * callback thread, in order with {@code onLost}.
     */
    void onElected(long token, Lease grant);
  }

  /**
   * Hears every new leader of an elector's job
   * ({@link Builder#onNewLeader}).
   */
  @FunctionalInterface
  public interface NewLeaderListener {
    /**
     * {@code holder} was granted the job with {@code token} (unsigned):
     * another holder, or this elector ({@link Elector#holder()}). Called at
     * most once per grant, in token order, on the elector's callback thread
     * (in order with {@code onElected} and {@code onLost}), and not after
     * {@link Elector#close()} returned. Our own grant may be reported a
     * moment before {@code onElected}: the watch can be faster than the
     * Acquire's answer. A free job is not reported.
     */
    void onNewLeader(String holder, long token);
  }

  /**
   * {@link NewLeaderListener} with the new leader's value too
   * ({@link Builder#onNewLeader(NewLeaderValueListener)}).
   */
  @FunctionalInterface
  public interface NewLeaderValueListener {
    /**
     * {@code holder} was granted the job with {@code token} (unsigned), and
     * publishes {@code value} ({@link Lease#value()} when this elector
     * learnt of the grant: the one published with it, or a later one;
     * empty, never null, when none): where to reach the new leader.
     * Called as {@link NewLeaderListener#onNewLeader} is: at most once per
     * grant, in token order. A later change of the value by the same leader
     * is not a new leader and is not reported here (observe the job, or
     * read {@link Elector#leader()}, for that). Advisory: the token fences,
     * not the value.
     */
    void onNewLeader(String holder, long token, byte[] value);
  }

  private Elector(Builder b) {
    this.client = b.client;
    this.job = b.job;
    this.holder = b.holder != null ? b.holder : electorHolder(b.name);
    this.ttl = b.ttl;
    this.bindToStream = b.bindToStream;
    this.preferred = b.preferred;
    this.yieldToPreferred = b.yieldToPreferred;
    this.slots = b.slots;
    this.onElected = b.onElected;
    this.onLost = b.onLost;
    this.onNewLeader = b.onNewLeader;
    this.value = b.value;
    this.callbacks = Executors.newSingleThreadExecutor(r -> {
      Thread t = new Thread(r, "leasehold-callbacks-" + job);
      t.setDaemon(true);
      return t;
    });
  }

  /**
   * A builder for an elector of {@code job} as {@code name@<uuid>}, with a
   * UUID made for this elector.
   *
   * @throws IllegalArgumentException if {@code job} or {@code name} is empty
   */
  public static Builder builder(Client client, String job, String name) {
    return new Builder(client, job, name);
  }

  /**
   * A fresh holder identity for one elector: {@code name@uuid}, with a UUID
   * made by this call. Two electors for one job in one process are then two
   * holders to the server: at most one leads, each with its own tokens.
   */
  static String electorHolder(String name) {
    return name + "@" + UUID.randomUUID();
  }

  /** Configures an {@link Elector}. */
  public static final class Builder {
    private final Client client;
    private final String job;
    private final String name;
    private String holder;
    private Duration ttl = Duration.ofSeconds(10);
    private boolean bindToStream;
    private boolean preferred;
    private boolean yieldToPreferred;
    private int slots;
    private ElectedListener onElected = (t, g) -> {};
    private LongConsumer onLost = t -> {};
    private NewLeaderValueListener onNewLeader;
    private byte[] value = new byte[0];

    private Builder(Client client, String job, String name) {
      this.client = Objects.requireNonNull(client, "client");
      this.job = Objects.requireNonNull(job, "job");
      this.name = Objects.requireNonNull(name, "name");
      if (job.isEmpty()) {
        throw new IllegalArgumentException("job must not be empty");
      }
      if (name.isEmpty()) {
        throw new IllegalArgumentException("name must not be empty");
      }
    }

    /** The lease's TTL (default 10 s); renewals go out every ttl/3. */
    public Builder ttl(Duration ttl) {
      if (ttl.isNegative() || ttl.isZero()) {
        throw new IllegalArgumentException("ttl must be positive");
      }
      this.ttl = ttl;
      return this;
    }

    /**
     * Binds every grant of the campaign to the client's connection
     * ({@code AcquireRequest.bind_to_stream}; default false): when the
     * client's end of the connection closes or resets, as when this process
     * dies or the client is closed, the server releases the lease at once
     * and grants the next waiter, instead of waiting out the TTL. A
     * connection that merely goes silent (a partition, a paused process)
     * releases nothing. The trade: a live leader whose connection is cut (a
     * proxy that closes it, a channel that reconnects) loses its lease at
     * once, and its writes are then fenced; the elector learns of it from
     * its next renewal and campaigns again.
     */
    public Builder bindToStream(boolean bind) {
      this.bindToStream = bind;
      return this;
    }

    /**
     * Campaigns as a preferred candidate ({@code AcquireRequest.preferred}
     * on every Acquire of the campaign; default false): while it waits it is
     * queued ahead of the campaigners that are not preferred (first come,
     * first served within each class), and the leader, unless it was itself
     * elected as a preferred one, is told at each renewal that a preferred
     * candidate waits. Nothing is taken from the leader: this elector is
     * elected when the leader hands over (a yielding elector does so at its
     * next renewal: {@link #yieldToPreferred(boolean)}), releases, or loses
     * its lease.
     */
    public Builder preferred(boolean preferred) {
      this.preferred = preferred;
      return this;
    }

    /**
     * Yields to a preferred candidate (default false): when a renewal's
     * answer says that a preferred candidate waits (our grant not being a
     * preferred one), the elector hands its lead over right after that
     * renewal, its safe point, to the first in line (a
     * {@link Elector#transfer()}: the successor leads with our token plus
     * one, the job never free in between), reports the end of its lead as
     * a transfer does ({@code onLost}, {@link Elector#awaitLost}), and
     * campaigns again, behind the successor. If the candidate left before
     * the hand-over ({@link NoSuccessorException}) it keeps leading; if the
     * lease was no longer ours it steps down as on any loss. An elector
     * that is itself {@link #preferred(boolean) preferred} is never told,
     * so it never yields.
     */
    public Builder yieldToPreferred(boolean yield) {
      this.yieldToPreferred = yield;
      return this;
    }

    /**
     * A value to publish with every grant of the campaign
     * ({@code AcquireRequest.value}, also on the campaigns after a loss;
     * default none): where to reach this elector when it leads, say its
     * address, which followers read with {@link Elector#leader()} or hear in
     * {@code onNewLeader} and observations ({@link Lease#value()}).
     * {@link Elector#setValue} changes it later. Advisory: the token fences,
     * not the value.
     *
     * @param value the bytes (copied); null or empty: none
     * @throws IllegalArgumentException over {@link Client#MAX_VALUE_BYTES}
     *     (the server would refuse every Acquire of the campaign)
     */
    public Builder value(byte[] value) {
      this.value = checkedValue(value);
      return this;
    }

    /** {@link #value(byte[])} as UTF-8 text (null: none). */
    public Builder value(String value) {
      return value(value == null ? null : value.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * Campaigns for a slot of a counted lease (a semaphore) with this many
     * slots ({@code AcquireRequest.slots}, 2 to {@link Client#MAX_SLOTS};
     * default 0, and 1 is the same: the ordinary lease of one leader): up to
     * {@code slots} electors of the job lead at once, each in its own slot,
     * with its own token (see
     * {@link Client#acquire(String, String, Duration, Duration, int)}).
     * While leading, {@link Elector#leaseJob()} names the slot's job
     * ({@code "{job}#{k}"}) and {@link Elector#slot()} is k: the elector
     * renews, releases and transfers that job, and writes fenced by its
     * token must name it. A campaign after a loss asks for any slot again.
     * A count the server refuses (over 100, or another count than the
     * job's) stops the campaign as any refused one does ({@link Elector#error()}).
     *
     * <p>Not with {@link #onNewLeader}, which follows the grants of one
     * lease (a counted lease has one per slot; {@link Client#observe} each
     * slot's job instead): {@link #build()} refuses both.
     *
     * @throws IllegalArgumentException a negative count
     */
    public Builder slots(int slots) {
      if (slots < 0) {
        throw new IllegalArgumentException("slots must not be negative");
      }
      this.slots = slots;
      return this;
    }

    /** Overrides the holder identity (default {@code name@<uuid>}, a UUID made per elector). */
    public Builder holder(String holder) {
      this.holder = holder;
      return this;
    }

    /** Called with the token when we become leader. */
    public Builder onElected(LongConsumer f) {
      Objects.requireNonNull(f);
      this.onElected = (t, g) -> f.accept(t);
      return this;
    }

    /**
     * Called with the token and the grant when we become leader
     * ({@code (token, grant) -> ...}): the grant's {@link Lease#job()} is
     * the job writes fenced by the token name, a counted lease's slot job
     * (see {@link ElectedListener}).
     */
    public Builder onElected(ElectedListener f) {
      this.onElected = Objects.requireNonNull(f);
      return this;
    }

    /** Called with the token when we stop leading with it. */
    public Builder onLost(LongConsumer f) {
      this.onLost = Objects.requireNonNull(f);
      return this;
    }

    /**
     * Called with the holder and token of every grant of the job while the
     * elector runs, ours included, in token order: each grant at most
     * once, never a lower token after a higher one (see
     * {@link NewLeaderListener}). The elector then keeps a
     * {@code WatchLease} stream open while it runs (opened again with
     * backoff if it breaks), and also reports what its campaign learns
     * (its own grants, the holder an Acquire or a renewal found in place),
     * so a broken watch delays a report of someone else's grant but never
     * of its own. {@link #onNewLeader(NewLeaderValueListener)} hears the
     * leader's value too.
     */
    public Builder onNewLeader(NewLeaderListener f) {
      Objects.requireNonNull(f);
      this.onNewLeader = (holder, token, value) -> f.onNewLeader(holder, token);
      return this;
    }

    /**
     * {@link #onNewLeader(NewLeaderListener)}, with the value each new
     * leader published with its grant ({@code (holder, token, value) ->
     * ...}; empty when none): where to reach it. Only grants are reported:
     * a value changed later by the same leader is not a new leader.
     */
    public Builder onNewLeader(NewLeaderValueListener f) {
      this.onNewLeader = Objects.requireNonNull(f);
      return this;
    }

    /**
     * The elector, not started.
     *
     * @throws IllegalArgumentException {@link #slots(int)} of 2 or more
     *     with {@link #onNewLeader}
     */
    public Elector build() {
      if (slots > 1 && onNewLeader != null) {
        throw new IllegalArgumentException(
            "onNewLeader follows one lease, and a counted lease (slots) has one per slot: observe each slot's job");
      }
      return new Elector(this);
    }

    /** The elector, campaigning. */
    public Elector start() {
      return build().start();
    }
  }

  /** Starts campaigning (once). */
  public Elector start() {
    lock.lock();
    try {
      if (thread == null) {
        thread = new Thread(this::run, "leasehold-elector-" + job);
        thread.setDaemon(true);
        thread.start();
        if (onNewLeader != null) {
          watcher = new Thread(this::watchLeaders, "leasehold-watch-" + job);
          watcher.setDaemon(true);
          watcher.start();
        }
      }
    } finally {
      lock.unlock();
    }
    return this;
  }

  /** Our holder identity. */
  public String holder() {
    return holder;
  }

  /** The job. */
  public String job() {
    return job;
  }

  /**
   * The job our lease is on while we lead: for a counted lease
   * ({@link Builder#slots}) the slot's job, {@code "{job}#{slot}"}, else
   * {@link #job()}. Writes fenced by {@link #token()} name it. Empty when
   * {@link #token()} is.
   */
  public java.util.Optional<String> leaseJob() {
    lock.lock();
    try {
      return token != 0 && System.nanoTime() - deadline < 0
          ? java.util.Optional.of(grantJob) : java.util.Optional.empty();
    } finally {
      lock.unlock();
    }
  }

  /**
   * The slot we lead in (0 to slots - 1), for a counted lease
   * ({@link Builder#slots}); empty when we do not lead, or the lease is
   * not counted.
   */
  public java.util.OptionalInt slot() {
    lock.lock();
    try {
      return token != 0 && System.nanoTime() - deadline < 0 && grantSlots > 0
          ? java.util.OptionalInt.of(grantSlot) : java.util.OptionalInt.empty();
    } finally {
      lock.unlock();
    }
  }

  /** The token we lead with; empty when not leading, or past our own deadline. */
  public OptionalLong token() {
    lock.lock();
    try {
      return token != 0 && System.nanoTime() - deadline < 0 ? OptionalLong.of(token) : OptionalLong.empty();
    } finally {
      lock.unlock();
    }
  }

  /**
   * The proof of the grant we lead with ({@link Lease#proof()}): the
   * server's signed statement that it issued {@link #token()} of this job to
   * {@link #holder()}, for storage leasehold does not own to check
   * ({@link Proofs#verify}), or to write with
   * ({@link Client#checkedWrite(String, String, byte[], byte[])}). Empty
   * when {@link #token()} is, and when the server signs nothing.
   */
  public java.util.Optional<String> proof() {
    lock.lock();
    try {
      return token != 0 && System.nanoTime() - deadline < 0
          ? java.util.Optional.ofNullable(proof) : java.util.Optional.empty();
    } finally {
      lock.unlock();
    }
  }

  /**
   * Changes the value this elector publishes ({@link Builder#value(byte[])}):
   * the new one goes with its next renewal while it leads (every ttl/3), or
   * with its next Acquire while it does not, and is sent with each renewal
   * until one succeeds (then no more: the server keeps it). Watchers of the
   * job see the change as {@link LeaseEvent.Kind#VALUE_CHANGED}. Returns at
   * once. Advisory: the token fences, not the value.
   *
   * @param value the bytes (copied); null or empty: clears it
   * @throws IllegalArgumentException over {@link Client#MAX_VALUE_BYTES}:
   *     refused here, nothing changed (the server would refuse the renewal
   *     that carried it, and the elector would step down)
   */
  public void setValue(byte[] value) {
    byte[] v = checkedValue(value);
    lock.lock();
    try {
      this.value = v;
      valueVersion++;
    } finally {
      lock.unlock();
    }
  }

  /** {@link #setValue(byte[])} as UTF-8 text (null: clears it). */
  public void setValue(String value) {
    setValue(value == null ? null : value.getBytes(StandardCharsets.UTF_8));
  }

  /** A copy of {@code value} (null: empty), at most {@link Client#MAX_VALUE_BYTES}. */
  static byte[] checkedValue(byte[] value) {
    if (value == null) {
      return new byte[0];
    }
    if (value.length > Client.MAX_VALUE_BYTES) {
      throw new IllegalArgumentException(
          "value is " + value.length + " bytes; the limit is " + Client.MAX_VALUE_BYTES + " bytes");
    }
    return value.clone();
  }

  /** The value this elector publishes (a copy; empty when none): the last {@link #setValue}, or the builder's. */
  public byte[] value() {
    lock.lock();
    try {
      return value.clone();
    } finally {
      lock.unlock();
    }
  }

  /**
   * The job's leader, as the server says now ({@link Client#getLease} of
   * this elector's job): its {@link Lease#holder()} (null when the job is
   * free), {@link Lease#token()} and {@link Lease#value()}, the value it
   * published, such as its address: how a follower finds the leader to
   * route to it.
   *
   * <pre>{@code
   * Lease leader = elector.leader();
   * if (leader.isHeld() && !elector.isLeader()) {
   *   forwardTo(leader.valueUtf8(), request); // its address
   * }
   * }</pre>
   *
   * <p>Advisory: the token fences, not the value; by the time a request
   * arrives the leader may have changed, and its writes are fenced then.
   *
   * <p>For a counted lease ({@link Builder#slots}) the job's own lease is
   * the line's: it shows the first waiter, not a slot's holder (read a
   * slot with {@code client.getLease(job + "#" + k)}).
   *
   * @throws LeaseholdException the call failed ({@link UnavailableException}...)
   */
  public Lease leader() {
    return client.getLease(job);
  }

  /** {@link #leader()} as a future; {@code cancel(true)} cancels the call. */
  public java.util.concurrent.CompletableFuture<Lease> leaderAsync() {
    return client.getLeaseAsync(job);
  }

  /** Whether we lead now. */
  public boolean isLeader() {
    return token().isPresent();
  }

  /**
   * The exception that stopped the campaign (the server refused it with an
   * error retrying cannot fix), or empty.
   */
  public java.util.Optional<LeaseholdException> error() {
    lock.lock();
    try {
      return java.util.Optional.ofNullable(refusal);
    } finally {
      lock.unlock();
    }
  }

  /**
   * Waits until we lead; the token, or empty on timeout or once closed.
   *
   * @throws LeaseholdException {@link #error()}, when the campaign stopped on one
   */
  public OptionalLong awaitElected(Duration timeout) throws InterruptedException {
    long end = System.nanoTime() + timeout.toNanos();
    lock.lock();
    try {
      while (token == 0 && !finished) {
        long left = end - System.nanoTime();
        if (left <= 0) {
          return OptionalLong.empty();
        }
        changed.awaitNanos(left);
      }
      if (token == 0 && refusal != null) {
        throw refusal;
      }
      return token != 0 ? OptionalLong.of(token) : OptionalLong.empty();
    } finally {
      lock.unlock();
    }
  }

  /** Waits until we no longer lead with the token we lead with now; true once that happened. */
  public boolean awaitLost(Duration timeout) throws InterruptedException {
    long end = System.nanoTime() + timeout.toNanos();
    lock.lock();
    try {
      long t = token;
      while (t != 0 && token == t) {
        long left = end - System.nanoTime();
        if (left <= 0) {
          return false;
        }
        changed.awaitNanos(left);
      }
      return true;
    } finally {
      lock.unlock();
    }
  }

  /**
   * {@link #transfer(String)} to the first waiter in line.
   */
  public Lease transfer() {
    return transfer(null);
  }

  /**
   * Hands the lead to a waiting Acquire ({@link Client#transferLease}, with
   * the token we lead with and the lease's current TTL): to the first
   * waiter whose holder is {@code toOrNull} (another elector's
   * {@link #holder()}), or to the first waiter in line when it is null or
   * empty. The successor is granted our token plus one at once, with no
   * moment when the job is free. On success this elector reports the end
   * of its lead as a loss ({@code onLost}, {@link #awaitLost}), then
   * campaigns again, behind the successor, unless it is being closed.
   * Returns the successor's lease.
   *
   * <p>A renewal racing with the transfer reports nothing more: the lead
   * ends once, whichever learns of it first.
   *
   * @throws IllegalStateException when not leading (nothing is sent)
   * @throws NoSuccessorException when no such waiter waits: nothing
   *     changed, we still lead
   * @throws LeaseLostException when the lease was no longer ours: the
   *     elector steps down (reports the loss) and campaigns again
   */
  public Lease transfer(String toOrNull) {
    long t;
    String on;
    lock.lock();
    try {
      if (token == 0 || System.nanoTime() - deadline >= 0) {
        throw new IllegalStateException(job + ": not leading, nothing to transfer");
      }
      t = token;
      on = grantJob;
    } finally {
      lock.unlock();
    }
    return handOver(t, on, toOrNull, null);
  }

  /**
   * The transfer of our lead with {@code t} on {@code on} (our lease's
   * job: a counted lease's slot job) to {@code toOrNull}, or the first in
   * line, bounded by {@code timeout} (null: the client's); on success, and
   * on LEASE_LOST, the lead ends and is reported, once.
   */
  private Lease handOver(long t, String on, String toOrNull, Duration timeout) {
    lock.lock();
    try {
      transferring = t;
    } finally {
      lock.unlock();
    }
    Lease successor;
    try {
      successor = timeout == null
          ? client.transferLease(on, holder, t, toOrNull, null)
          : client.transferLease(on, holder, t, toOrNull, null, timeout);
    } catch (LeaseLostException e) {
      LOG.warn("{}: transfer of token {}: lease lost: {}", on, t, e.getMessage());
      setFollower(t);
      throw e;
    } finally {
      lock.lock();
      try {
        if (transferring == t) {
          transferring = 0;
        }
      } finally {
        lock.unlock();
      }
    }
    LOG.debug("{}: transferred token {} to {} (token {})", on, t, successor.holder(), successor.token());
    setFollower(t);
    return successor;
  }

  /**
   * Stops campaigning, releases the lease if held, and waits for that and
   * for the callbacks. The release is bounded by our deadline (at least
   * 200 ms): past it the lease runs out on its own.
   */
  @Override
  public void close() {
    Thread t;
    lock.lock();
    try {
      stopped = true;
      changed.signalAll();
      t = thread;
    } finally {
      lock.unlock();
    }
    boolean interrupted = false;
    Thread w;
    Observation o;
    lock.lock();
    try {
      w = watcher;
      o = watching;
    } finally {
      lock.unlock();
    }
    if (o != null) {
      o.close();
    }
    for (Thread th : new Thread[] {t, w}) {
      if (th == null || th == Thread.currentThread()) {
        continue;
      }
      while (true) {
        try {
          th.join();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
    }
    callbacks.shutdown();
    if (!Thread.currentThread().getName().startsWith("leasehold-callbacks-")) {
      try {
        callbacks.awaitTermination(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    lock.lock();
    try {
      finished = true;
      changed.signalAll();
    } finally {
      lock.unlock();
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  // The campaign, on the elector thread.

  private enum Outcome { DONE, STOP, TIMEOUT }

  /** How a sleep while leading ended. */
  private enum Wake { TIME, STOP, ENDED }

  private long ttlNanos() {
    return ttl.toNanos();
  }

  /** A retry warning: at most one every 5 s, with the count suppressed since; every one at DEBUG. */
  private void retryWarning(String message) {
    LOG.debug(message);
    long n = warnings.allow(System.nanoTime());
    if (n >= 0) {
      LOG.warn("{} ({} similar warnings suppressed)", message, n);
    }
  }

  private static long clamp(long v, long lo, long hi) {
    return Math.min(Math.max(v, lo), hi);
  }

  private void run() {
    long ms = TimeUnit.MILLISECONDS.toNanos(1);
    Retry.Backoff backoff = Retry.Backoff.campaign(ttlNanos());
    long campaignWait = clamp(ttlNanos() * 3, 1000 * ms, 30_000 * ms);
    try {
      while (!isStopped()) {
        long sent = System.nanoTime();
        long limit = campaignWait + ttlNanos();
        byte[] v;
        long version;
        lock.lock();
        try {
          v = value;
          version = valueVersion;
        } finally {
          lock.unlock();
        }
        ListenableFuture<AcquireResponse> f = client.acquireCall(job, holder, ttl, Duration.ofNanos(campaignWait),
            bindToStream, preferred, v, slots, Duration.ofNanos(limit));
        Outcome o = await(f, sent + limit);
        if (o == Outcome.STOP) {
          releaseIfGranted();
          return;
        }
        if (o == Outcome.TIMEOUT) {
          retryWarning(job + ": campaign: acquire timed out");
          continue;
        }
        AcquireResponse r;
        try {
          r = f.get();
        } catch (ExecutionException e) {
          LeaseholdException le = Errors.from(e.getCause());
          if (refused(le)) {
            LOG.error("{}: campaign refused, not campaigning again: {}", job, le.toString());
            lock.lock();
            try {
              refusal = le;
            } finally {
              lock.unlock();
            }
            return;
          }
          retryWarning(job + ": campaign: acquire failed, retrying: " + le);
          client.reconnectNow();
          if (sleepUntil(System.nanoTime() + backoff.next())) {
            return;
          }
          continue;
        }
        backoff.reset();
        byte[] grantValue = r.getLease().getValue().toByteArray();
        observeLeader(r.getLease().getHolder(), r.getLease().getToken(), grantValue);
        if (!r.getAcquired()) {
          continue;
        }
        published(version); // the grant carries the value sent with it
        Lease grant = Lease.fromProto(r.getLease());
        long granted = grant.token();
        lock.lock();
        try {
          // What the lead renews, releases and transfers: a counted
          // lease's slot job, which may differ from one grant to the next.
          grantJob = grant.job();
          grantSlot = grant.slot();
          grantSlots = grant.slots();
        } finally {
          lock.unlock();
        }
        Long anchor = anchor(grant.job(), granted, sent);
        if (anchor == null) {
          continue;
        }
        if (lead(grant, grantValue, anchor)) {
          return;
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (RuntimeException e) {
      LOG.error("{}: elector failed", job, e);
      long t;
      lock.lock();
      try {
        t = token;
      } finally {
        lock.unlock();
      }
      if (t != 0) {
        setFollower(t);
      }
    } finally {
      lock.lock();
      try {
        finished = true;
        changed.signalAll();
      } finally {
        lock.unlock();
      }
    }
  }

  /**
   * Errors retrying cannot fix: the server refused the request itself (a
   * TTL out of its range, a job name too long) or the caller (its policy).
   */
  static boolean refused(LeaseholdException e) {
    return e instanceof InvalidArgumentException
        || e instanceof UnauthenticatedException
        || e instanceof PermissionDeniedException;
  }

  private boolean isStopped() {
    lock.lock();
    try {
      return stopped;
    } finally {
      lock.unlock();
    }
  }

  private void signal() {
    lock.lock();
    try {
      changed.signalAll();
    } finally {
      lock.unlock();
    }
  }

  /** Waits for {@code f}, a stop, or {@code until}; cancels {@code f} unless it completed. */
  private Outcome await(ListenableFuture<?> f, long until) throws InterruptedException {
    f.addListener(this::signal, Runnable::run);
    lock.lock();
    try {
      while (true) {
        if (f.isDone()) {
          return Outcome.DONE;
        }
        if (stopped) {
          f.cancel(true);
          return Outcome.STOP;
        }
        long left = until - System.nanoTime();
        if (left <= 0) {
          f.cancel(true);
          return Outcome.TIMEOUT;
        }
        changed.awaitNanos(left);
      }
    } finally {
      lock.unlock();
    }
  }

  /** Sleeps until {@code until}; true if told to stop meanwhile. */
  private boolean sleepUntil(long until) throws InterruptedException {
    lock.lock();
    try {
      while (!stopped) {
        long left = until - System.nanoTime();
        if (left <= 0) {
          return false;
        }
        changed.awaitNanos(left);
      }
      return true;
    } finally {
      lock.unlock();
    }
  }

  /**
   * Sleeps until {@code until} while leading with {@code t}: STOP if told to
   * stop meanwhile, ENDED if that lead ended meanwhile (a transfer).
   */
  private Wake sleepLeading(long t, long until) throws InterruptedException {
    lock.lock();
    try {
      while (true) {
        if (stopped) {
          return Wake.STOP;
        }
        if (token != t) {
          return Wake.ENDED;
        }
        long left = until - System.nanoTime();
        if (left <= 0) {
          return Wake.TIME;
        }
        changed.awaitNanos(left);
      }
    } finally {
      lock.unlock();
    }
  }

  /** Whether we no longer lead with {@code t}: a transfer ended it (and reported it). */
  private boolean ended(long t) {
    lock.lock();
    try {
      return token != t;
    } finally {
      lock.unlock();
    }
  }

  /** Whether a transfer of {@code t} is on its way. */
  private boolean transferring(long t) {
    lock.lock();
    try {
      return transferring == t;
    } finally {
      lock.unlock();
    }
  }

  /**
   * The instant our lease's TTL may be counted from: at or before the
   * server granted or last renewed it. A waiting Acquire may have been
   * granted long after it was sent; then a Renew sent now confirms the
   * lease and gives a fresh anchor. Null when it cannot.
   */
  private Long anchor(String on, long granted, long sent) {
    if (System.nanoTime() - (sent + ttlNanos() / 10) < 0) {
      return sent;
    }
    long at = System.nanoTime();
    try {
      client.renew(on, holder, granted, ttl, ttl.dividedBy(2));
      return at;
    } catch (LeaseholdException e) {
      LOG.warn("{}: granted token {}, but the confirming renew failed: {}", job, granted, e.toString());
      return null;
    }
  }

  /** Notes that the server holds the value of {@code version} (or a later one) for our lease. */
  private void published(long version) {
    lock.lock();
    try {
      if (version > valuePublished) {
        valuePublished = version;
      }
    } finally {
      lock.unlock();
    }
  }

  /**
   * Leads with {@code grant} until lost (false) or told to stop (releases;
   * true), renewing the job the grant is on (a counted lease's slot job).
   */
  private boolean lead(Lease grant, byte[] grantValue, long sent) throws InterruptedException {
    long t = grant.token();
    String on = grant.job();
    long every = ttlNanos() / 3;
    Retry.Backoff retry = Retry.Backoff.renew(ttlNanos());
    long until = sent + ttlNanos();
    setLeader(grant, grantValue, until);
    long next = sent + every;
    while (true) {
      long wake = next - until < 0 ? next : until;
      Wake w = sleepLeading(t, wake);
      if (w == Wake.STOP) {
        return resign(t, on, until);
      }
      if (w == Wake.ENDED) {
        return false; // transferred: reported by transfer()
      }
      long now = System.nanoTime();
      if (now - until >= 0) {
        LOG.warn("{}: token {} reached its deadline without a renewal", on, t);
        break;
      }
      // A value set since the server last took one goes with this renewal
      // (and each next one until one succeeds); otherwise unset: kept.
      byte[] v = null;
      long version;
      lock.lock();
      try {
        version = valueVersion;
        if (valuePublished < valueVersion) {
          v = value;
        }
      } finally {
        lock.unlock();
      }
      ListenableFuture<RenewResponse> f = client.renewCall(on, holder, t, ttl, v, Duration.ofNanos(until - now));
      Outcome o = await(f, until);
      if (o == Outcome.STOP) {
        return resign(t, on, until);
      }
      if (ended(t)) {
        return false; // transferred while the renewal was on its way: its answer means nothing now
      }
      if (o == Outcome.TIMEOUT) {
        LOG.warn("{}: renew of token {} did not answer before the deadline", on, t);
        break;
      }
      RenewResponse renewed;
      try {
        renewed = f.get();
      } catch (ExecutionException e) {
        LeaseholdException le = Errors.from(e.getCause());
        if (le instanceof LeaseLostException lost) {
          observeLeader(lost.currentHolder(), lost.currentToken().orElse(0), null);
        }
        if (le instanceof LeaseLostException || refused(le)) {
          if (transferring(t)) {
            // A transfer of t, on its way, has handed the lease over: the
            // end of the lead, reported once (here or by transfer()).
            LOG.debug("{}: renew of token {} refused during its transfer: {}", on, t, le.getMessage());
          } else {
            LOG.warn("{}: lease lost (token {}): {}", on, t, le.getMessage());
          }
          break;
        }
        retryWarning(job + ": renew of token " + t + " failed, retrying: " + le);
        client.reconnectNow();
        long at = System.nanoTime();
        next = at + retry.nextBefore(until, at);
        continue;
      }
      until = now + ttlNanos();
      next = now + every;
      retry.reset();
      if (v != null) {
        published(version);
      }
      lock.lock();
      try {
        if (token == t) {
          deadline = until;
          if (!renewed.getLease().getProof().isEmpty()) {
            proof = renewed.getLease().getProof(); // the same, or made again under a new signing key
          }
        }
      } finally {
        lock.unlock();
      }
      if (yieldToPreferred && renewed.getSuccessorWaiting() && yieldLead(t, on, until)) {
        return false; // handed over (or lost): reported by handOver()
      }
    }
    setFollower(t);
    return false;
  }

  /**
   * Right after a renewal of {@code t} that said a preferred candidate
   * waits, our safe point (nothing of ours in flight): hands the lead to
   * the first in line, bounded by our deadline. True when the lead ended
   * (handed over, or found lost), and was reported; false when we still
   * lead (the candidate left, or the call failed: the next renewal says
   * again, or finds the lease lost).
   */
  private boolean yieldLead(long t, String on, long until) {
    long left = until - System.nanoTime();
    if (left <= 0) {
      return false; // the loop steps down at its deadline
    }
    try {
      Lease successor = handOver(t, on, null, Duration.ofNanos(left));
      LOG.info("{}: handed token {} over to the preferred candidate {} (token {})", on, t, successor.holder(),
          successor.token());
      return true;
    } catch (NoSuccessorException e) {
      LOG.debug("{}: the preferred candidate left before the hand-over: leading on with token {}", on, t);
      return false;
    } catch (LeaseLostException e) {
      return true; // handOver() stepped down
    } catch (LeaseholdException e) {
      LOG.debug("{}: hand-over of token {} to a preferred candidate failed: {}", on, t, e.toString());
      return false;
    }
  }

  private boolean resign(long t, String on, long until) {
    if (!setFollower(t)) {
      return true; // no longer ours (transferred): nothing to release
    }
    long bound = Math.max(until - System.nanoTime(), TimeUnit.MILLISECONDS.toNanos(200));
    try {
      client.release(on, holder, t, Duration.ofNanos(bound));
    } catch (LeaseholdException e) {
      LOG.warn("{}: release of token {} on resign failed: {}", on, t, e.toString());
    }
    return true;
  }

  /**
   * Stopped while an Acquire was in flight, which the server may have
   * granted just before the cancel. Best effort, briefly: release the lease
   * if it is ours, rather than leave it to run out.
   */
  private void releaseIfGranted() {
    try {
      Lease l = client.getLease(job, Duration.ofMillis(200));
      if (holder.equals(l.holder())) {
        client.release(job, holder, l.token(), Duration.ofMillis(200));
      }
    } catch (LeaseholdException e) {
      // best effort
    }
  }

  private void setLeader(Lease grant, byte[] grantValue, long until) {
    long t = grant.token();
    lock.lock();
    try {
      token = t;
      proof = grant.proof();
      deadline = until;
      changed.signalAll();
    } finally {
      lock.unlock();
    }
    LOG.debug("{}: elected with token {}", job, t);
    observeLeader(holder, t, grantValue);
    try {
      callbacks.execute(() -> {
        try {
          onElected.onElected(t, grant);
        } catch (RuntimeException e) {
          LOG.warn("{}: elector callback failed", job, e);
        }
      });
    } catch (java.util.concurrent.RejectedExecutionException e) {
      // closed
    }
  }

  /** Ends the lead with {@code t} and reports it, once; false when it had already ended. */
  private boolean setFollower(long t) {
    lock.lock();
    try {
      if (token != t) {
        return false;
      }
      token = 0;
      proof = null;
      changed.signalAll();
    } finally {
      lock.unlock();
    }
    LOG.debug("{}: stepped down from token {}", job, t);
    dispatch(onLost, t);
    return true;
  }

  /**
   * Notes {@code h} leading with {@code t}, which published {@code v}:
   * onNewLeader hears it if {@code t} is above every token reported.
   * Queued under the lock, so the callback thread delivers the reports in
   * token order. {@code v} null: not known here (a renewal's LEASE_LOST
   * names only the holder and token), so it is asked for.
   */
  private void observeLeader(String h, long t, byte[] v) {
    if (onNewLeader == null || h == null || h.isEmpty() || t == 0) {
      return;
    }
    if (v == null) {
      observeLeaderValue(t);
      return;
    }
    lock.lock();
    try {
      if (Long.compareUnsigned(t, leaderReported) <= 0) {
        return;
      }
      leaderReported = t;
      try {
        callbacks.execute(() -> {
          try {
            onNewLeader.onNewLeader(h, t, v);
          } catch (RuntimeException e) {
            LOG.warn("{}: onNewLeader failed", job, e);
          }
        });
      } catch (java.util.concurrent.RejectedExecutionException e) {
        // closed
      }
    } finally {
      lock.unlock();
    }
  }

  /**
   * A grant of {@code t} learnt without its value: a GetLease tells it
   * (the watch usually reports the grant first, and then this reports
   * nothing). Reported only when the lease is still that grant or a later
   * one: the value of a grant already gone cannot be read any more, and
   * onNewLeader reports each grant at most once, never with a made-up
   * value. Off the elector's thread, so a step-down is not delayed.
   */
  private void observeLeaderValue(long t) {
    lock.lock();
    try {
      if (stopped || Long.compareUnsigned(t, leaderReported) <= 0) {
        return;
      }
    } finally {
      lock.unlock();
    }
    client.getLeaseAsync(job).whenComplete((l, e) -> {
      if (e == null && l.isHeld() && Long.compareUnsigned(l.token(), t) >= 0) {
        observeLeader(l.holder(), l.token(), l.value());
      }
    });
  }

  /**
   * The watcher thread: keeps the job's WatchLease open while the elector
   * runs, opening it again with the campaign's backoff when it breaks (a
   * new stream's first event is the current lease, so little is missed).
   * A watch refused for good (invalid argument, unauthenticated, permission
   * denied) is not opened again: onNewLeader then hears only what the
   * campaign learns.
   */
  private void watchLeaders() {
    Retry.Backoff retry = Retry.Backoff.campaign(ttlNanos());
    try {
      while (!isStopped()) {
        Observation o = client.observe(job, e -> {
          retry.reset();
          observeLeader(e.lease().holder(), e.lease().token(), e.lease().value());
        });
        lock.lock();
        try {
          watching = o;
          if (stopped) {
            o.close();
          }
        } finally {
          lock.unlock();
        }
        o.done().whenComplete((v, e) -> signal());
        lock.lock();
        try {
          while (!stopped && !o.done().isDone()) {
            changed.await();
          }
        } finally {
          lock.unlock();
        }
        if (isStopped()) {
          o.close();
          return;
        }
        LeaseholdException err = null;
        try {
          o.done().getNow(null);
        } catch (java.util.concurrent.CompletionException e) {
          err = Errors.from(e.getCause());
        }
        if (err != null && refused(err)) {
          LOG.warn("{}: watch refused; onNewLeader hears only what the campaign learns: {}", job, err.toString());
          return;
        }
        retryWarning(job + ": watch ended; watching again" + (err == null ? "" : ": " + err));
        client.reconnectNow();
        if (sleepUntil(System.nanoTime() + retry.next())) {
          return;
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private void dispatch(LongConsumer f, long t) {
    try {
      callbacks.execute(() -> {
        try {
          f.accept(t);
        } catch (RuntimeException e) {
          LOG.warn("{}: elector callback failed", job, e);
        }
      });
    } catch (java.util.concurrent.RejectedExecutionException e) {
      // closed
    }
  }
}
