package dev.leasehold.client;

import java.nio.charset.StandardCharsets;

/**
 * A stored value, as {@link Client#read} returns it.
 *
 * @param found false when never written or deleted
 * @param value the bytes
 * @param token the token of the write that stored it
 * @param version the key's version; 0 if never written
 */
public record Value(boolean found, byte[] value, long token, long version) {
  /** The value as UTF-8 text. */
  public String valueUtf8() {
    return new String(value, StandardCharsets.UTF_8);
  }
}
