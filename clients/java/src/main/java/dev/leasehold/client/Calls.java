package dev.leasehold.client;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The Acquires and Renews of one client on their way, and the tokens they
 * told their callers, per (job, holder): what the give-back of a cancelled
 * waiting Acquire must respect. Its caller never saw the reply, so the
 * give-back reads the lease and releases it if it is the holder's. That is
 * only safe if nothing told a caller of this client that the holder leads
 * with that token:
 *
 * <ul>
 *   <li>No call of this client for the (job, holder) started after the
 *       cancelled one, and none is on its way: a retry may have been granted
 *       the lease, and been told.
 *   <li>The token is above every token a call of this client was told for
 *       the pair: an earlier grant or renewal told its caller that it leads.
 *   <li>The release is a give-back ({@code ReleaseRequest.give_back}): the
 *       server keeps the lease if the holder asked again since the grant (an
 *       Acquire or Renew from anywhere, racing with the give-back), whose
 *       answer may have told it that it leads.
 * </ul>
 *
 * <p>A pair is kept only while it has a call on its way or a token told (a
 * release through the client forgets what was told), so this stays small.
 * Thread-safe.
 */
final class Calls {
  private record Key(String job, String holder) {}

  /** One (job, holder) pair's calls. */
  private static final class Pair {
    /** The number of the newest call started. */
    long newest;
    /** Calls started and not ended. */
    int inFlight;
    /** The highest token (unsigned) a call was told the holder holds; 0 for none. */
    long told;
  }

  private final Map<Key, Pair> pairs = new HashMap<>();
  private final AtomicLong next = new AtomicLong();

  /** An Acquire or Renew of ({@code job}, {@code holder}) starts; end the returned call however it ends. */
  Asking start(String job, String holder) {
    long n = next.incrementAndGet();
    Key key = new Key(job, holder);
    synchronized (pairs) {
      Pair p = pairs.computeIfAbsent(key, k -> new Pair());
      p.newest = n;
      p.inFlight++;
    }
    return new Asking(key, n);
  }

  /** The holder released the pair's lease: nothing told is live now. */
  void released(String job, String holder) {
    Key key = new Key(job, holder);
    synchronized (pairs) {
      Pair p = pairs.get(key);
      if (p != null) {
        p.told = 0;
        if (p.inFlight == 0) {
          pairs.remove(key);
        }
      }
    }
  }

  /** Whether the give-back of call {@code n} (ended) may release {@code token}: see the class docs. */
  boolean mayGiveBack(String job, String holder, long n, long token) {
    synchronized (pairs) {
      Pair p = pairs.get(new Key(job, holder));
      return p == null || (p.newest == n && p.inFlight == 0 && Long.compareUnsigned(token, p.told) > 0);
    }
  }

  /**
   * Whether the give-back of call {@code n} (ended), whose grant reached
   * the client but not its caller, may release that grant: no call for the
   * pair started since it, and none is on its way.
   */
  boolean mayGiveBackUndelivered(String job, String holder, long n) {
    synchronized (pairs) {
      Pair p = pairs.get(new Key(job, holder));
      return p == null || (p.newest == n && p.inFlight == 0);
    }
  }

  /** The number of pairs kept (for tests). */
  int size() {
    synchronized (pairs) {
      return pairs.size();
    }
  }

  /** One call on its way, until {@link #end}. */
  final class Asking {
    private final Key key;
    /** This call's number. */
    final long n;
    private boolean ended;

    private Asking(Key key, long n) {
      this.key = key;
      this.n = n;
    }

    /** The call told its caller that the holder leads with {@code token}. */
    void told(long token) {
      synchronized (pairs) {
        Pair p = pairs.get(key);
        if (p != null && !ended && Long.compareUnsigned(token, p.told) > 0) {
          p.told = token;
        }
      }
    }

    /** The call ended: answered, failed or cancelled. Only the first end counts. */
    void end() {
      synchronized (pairs) {
        if (ended) {
          return;
        }
        ended = true;
        Pair p = pairs.get(key);
        if (p != null) {
          p.inFlight--;
          if (p.inFlight == 0 && p.told == 0) {
            pairs.remove(key);
          }
        }
      }
    }
  }
}
