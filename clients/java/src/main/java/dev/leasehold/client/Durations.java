package dev.leasehold.client;

import java.time.Duration;

final class Durations {
  private Durations() {}

  static com.google.protobuf.Duration toProto(Duration d) {
    if (d.isNegative()) {
      d = Duration.ZERO;
    }
    return com.google.protobuf.Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  static Duration fromProto(com.google.protobuf.Duration d) {
    return Duration.ofSeconds(Math.max(d.getSeconds(), 0), Math.max(d.getNanos(), 0));
  }
}
