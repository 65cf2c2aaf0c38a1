package dev.leasehold.client;

import java.time.Instant;

/**
 * One action of the chaos API on a job, as the first page of its
 * {@link Client#history} lists them (a server started with
 * {@code --enable-chaos}).
 *
 * @param at when, on the server's wall clock
 * @param action expire, pause, delay, fence, transfer or clear
 * @param detail what it did, for people ("token 3 expired on purpose")
 */
public record ChaosEvent(Instant at, String action, String detail) {
  static ChaosEvent fromProto(dev.leasehold.v1.ChaosEvent e) {
    return new ChaosEvent(e.hasAt() ? Tenure.instant(e.getAt()) : null, e.getAction(), e.getDetail());
  }
}
