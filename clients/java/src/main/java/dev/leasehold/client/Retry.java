package dev.leasehold.client;

import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

/**
 * Retry pacing shared by the elector: jittered exponential backoff, and
 * warnings limited to one every few seconds during an outage.
 */
final class Retry {
  private Retry() {}

  /** An elector logs at most one retry warning this often; the ones in between are counted, and the count goes with the next warning. */
  static final long WARN_EVERY_NANOS = TimeUnit.SECONDS.toNanos(5);

  private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);

  /** Jittered exponential backoff: the n-th wait is drawn evenly from [d/2, d] with d = min(cap, base * 2^n). */
  static final class Backoff {
    private final long base;
    private final long cap;
    private int attempt;

    Backoff(long baseNanos, long capNanos) {
      this.base = baseNanos;
      this.cap = Math.max(capNanos, baseNanos);
    }

    /** A campaign's: from ttl/10 (10 to 100 ms), doubling, up to 1 s. */
    static Backoff campaign(long ttlNanos) {
      return new Backoff(Math.min(Math.max(ttlNanos / 10, 10 * MS), 100 * MS), 1000 * MS);
    }

    /** A renewal's: from ttl/10 (at least 10 ms), doubling, up to 1 s; see {@link #nextBefore}. */
    static Backoff renew(long ttlNanos) {
      return new Backoff(Math.max(ttlNanos / 10, 10 * MS), 1000 * MS);
    }

    void reset() {
      attempt = 0;
    }

    long next() {
      long d = base << Math.min(attempt, 20);
      if (d <= 0 || d > cap) {
        d = cap;
      }
      attempt++;
      long half = d / 2;
      return half + ThreadLocalRandom.current().nextLong(half + 1);
    }

    /** {@link #next()}, but never past half the time left to {@code deadline} (nor under 10 ms). */
    long nextBefore(long deadline, long now) {
      return Math.max(Math.min(next(), (deadline - now) / 2), 10 * MS);
    }
  }

  /** Limits retry warnings to one every {@link #WARN_EVERY_NANOS}. */
  static final class Warnings {
    private boolean any;
    private long last;
    private long suppressed;

    /** The count suppressed since the last warning, if one may be logged at {@code now}; else -1. */
    synchronized long allow(long now) {
      if (any && now - last < WARN_EVERY_NANOS) {
        suppressed++;
        return -1;
      }
      any = true;
      last = now;
      long n = suppressed;
      suppressed = 0;
      return n;
    }
  }
}
