package dev.leasehold.client;

import java.time.Duration;

/**
 * The work of one shard, for {@link ShardMember.Builder#work(ShardWork)}:
 * run on an executor while the member owns the shard. On a revoke or a
 * loss the member cancels it ({@code cancelled} turns true and the
 * work's thread is interrupted) and waits until it has returned before it
 * acknowledges the revoke: so no shard's work runs on once it has moved.
 */
@FunctionalInterface
public interface ShardWork {
  /**
   * Works on {@code shard} until {@code cancelled} (or an interrupt) says
   * to stop, then returns. Returning earlier ends the work, not the
   * ownership. An exception is logged.
   */
  void run(Shard shard, Cancellation cancelled) throws Exception;

  /** Tells a shard's work to stop. */
  interface Cancellation {
    /** Whether the work is to stop. */
    boolean isCancelled();

    /** Waits until the work is to stop. */
    void await() throws InterruptedException;

    /** Waits at most {@code timeout} until the work is to stop; whether it is. */
    boolean await(Duration timeout) throws InterruptedException;
  }
}
