package dev.leasehold.client;

import io.grpc.CallCredentials;
import io.grpc.Metadata;
import java.util.concurrent.Executor;

/**
 * Call credentials that send {@code authorization: Bearer SECRET} on every
 * call, streams included. Its {@link #toString()} does not show the secret.
 * {@link Security} uses it; for a channel of your own, combine it with the
 * channel's credentials ({@code CompositeChannelCredentials.create}).
 */
public final class BearerToken extends CallCredentials {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final String value;

  private BearerToken(String value) {
    this.value = value;
  }

  /**
   * The credentials for {@code secret} (trimmed).
   *
   * @throws IllegalArgumentException when it is empty or not printable ASCII without spaces
   */
  public static BearerToken of(String secret) {
    String s = secret.strip();
    if (s.isEmpty() || !s.chars().allMatch(c -> c > 0x20 && c < 0x7f)) {
      throw new IllegalArgumentException("the bearer token must be non-empty printable ASCII without spaces");
    }
    return new BearerToken("Bearer " + s);
  }

  @Override
  public void applyRequestMetadata(RequestInfo requestInfo, Executor appExecutor, MetadataApplier applier) {
    Metadata md = new Metadata();
    md.put(AUTHORIZATION, value);
    applier.apply(md);
  }

  @Override
  public String toString() {
    return "BearerToken[<secret>]";
  }
}
