package dev.leasehold.examples.twoworkers;

import dev.leasehold.client.Client;
import dev.leasehold.client.Elector;
import dev.leasehold.client.FencedException;
import dev.leasehold.client.LeaseholdException;
import java.time.Duration;
import java.util.OptionalLong;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * One worker of a pair: it campaigns for a job with an {@link Elector} and,
 * while it leads, writes its state to the job's fenced store with its token
 * every 200 ms. Start two; one leads. Stop the leader (Ctrl-C, SIGTERM) and
 * it resigns, so the other takes over at once with the next token.
 *
 * <pre>java -jar target/two-workers.jar JOB [HOST:PORT]</pre>
 *
 * <p>It prints one line per event: {@code leader token=N} when elected,
 * {@code wrote version=V token=N} per write, {@code fenced token=N} when a
 * write is refused because another worker holds a newer token,
 * {@code lost token=N} when it steps down, {@code resigned} and
 * {@code exit 0} on SIGTERM or SIGINT.
 */
public final class Worker {
  private static final Duration TTL = Duration.ofSeconds(5);
  private static final long WRITE_EVERY_MS = 200;

  private Worker() {}

  private static synchronized void say(String line) {
    System.out.println(line);
    System.out.flush();
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 1 || args.length > 2) {
      System.err.println("usage: two-workers JOB [HOST:PORT]   (default server " + Client.DEFAULT_TARGET + ")");
      System.exit(2);
    }
    String job = args[0];
    String target = args.length > 1 ? args[1] : Client.DEFAULT_TARGET;

    CountDownLatch stop = new CountDownLatch(1);
    CountDownLatch stopped = new CountDownLatch(1);
    // SIGTERM and SIGINT run the shutdown hooks: this one stops the loop
    // below, waits for it to resign, and ends the process with status 0
    // (the JVM's own status after a signal would be 128 + its number).
    Thread hook = new Thread(() -> {
      if (stopped.getCount() == 0) {
        return; // main ended on its own (an error): keep its exit status
      }
      stop.countDown();
      try {
        stopped.await(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      say("exit 0");
      Runtime.getRuntime().halt(0);
    }, "two-workers-shutdown");
    Runtime.getRuntime().addShutdownHook(hook);

    try (Client client = Client.connect(target);
        Elector elector = Elector.builder(client, job, "two-workers")
            .ttl(TTL)
            .onElected(t -> say("leader token=" + Long.toUnsignedString(t)))
            .onLost(t -> say("lost token=" + Long.toUnsignedString(t)))
            .start()) {
      say("worker " + elector.holder() + " campaigning for " + job + " on " + target + " (client " + Client.VERSION + ")");
      long count = 0;
      long fencedToken = 0;
      while (!stop.await(WRITE_EVERY_MS, TimeUnit.MILLISECONDS)) {
        if (elector.error().isPresent()) {
          throw elector.error().get(); // refused for good (a bad job name, no permission): exit 1
        }
        OptionalLong token = elector.token();
        if (token.isEmpty() || token.getAsLong() == fencedToken) {
          continue; // not leading (or fenced with this token: wait for the elector to step down)
        }
        long t = token.getAsLong();
        try {
          count++;
          long version = client.checkedWrite(job, t, "state", elector.holder() + " count=" + count);
          say("wrote version=" + Long.toUnsignedString(version) + " token=" + Long.toUnsignedString(t));
        } catch (FencedException e) {
          // Someone holds a newer token: we are not the leader any more.
          fencedToken = t;
          say("fenced token=" + Long.toUnsignedString(t));
        } catch (LeaseholdException e) {
          say("write failed: " + e.getMessage());
        }
      }
      // Told to stop: close() (the end of this block) releases the lease,
      // so the other worker's waiting Acquire is granted at once.
    } finally {
      say("resigned");
      stopped.countDown();
    }
  }
}
