package dev.leasehold.client;

import io.grpc.ChannelCredentials;
import io.grpc.CompositeChannelCredentials;
import io.grpc.InsecureChannelCredentials;
import io.grpc.TlsChannelCredentials;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * TLS settings and credentials for {@link Client#connect(String, Security)}.
 * With a CA or a client certificate (or an {@code https://} target) the
 * channel is TLS ({@link TlsChannelCredentials}); otherwise it is plaintext.
 * A bearer token is sent on every call ({@link BearerToken}).
 *
 * <pre>{@code
 * Security security = Security.builder()
 *     .caFile(Path.of("/etc/leasehold/ca.pem"))
 *     .clientCertificate(Path.of("/etc/leasehold/worker.pem"), Path.of("/etc/leasehold/worker-key.pem"))
 *     .token(System.getenv("LEASEHOLD_SECRET"))
 *     .build();
 * }</pre>
 *
 * {@link #toString()} does not show the token.
 */
public final class Security {
  private final byte[] caPem;
  private final byte[] certPem;
  private final byte[] keyPem;
  private final BearerToken token;
  private final String serverName;

  private Security(Builder b) {
    this.caPem = b.caPem;
    this.certPem = b.certPem;
    this.keyPem = b.keyPem;
    this.token = b.token;
    this.serverName = b.serverName;
  }

  /** A builder; with nothing set, a plaintext channel without credentials. */
  public static Builder builder() {
    return new Builder();
  }

  /** Whether these settings ask for TLS (a CA or a client certificate). */
  public boolean tls() {
    return caPem != null || certPem != null;
  }

  /** The name the server's certificate must carry, or null for the target's host. */
  public String serverName() {
    return serverName;
  }

  /**
   * The channel credentials: TLS (with {@code tls}, or when these settings
   * ask for it) or plaintext, combined with the bearer token if any.
   */
  public ChannelCredentials channelCredentials(boolean tls) {
    ChannelCredentials creds;
    if (tls || tls()) {
      TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
      try {
        if (caPem != null) {
          b.trustManager(new ByteArrayInputStream(caPem));
        }
        if (certPem != null) {
          b.keyManager(new ByteArrayInputStream(certPem), new ByteArrayInputStream(keyPem));
        }
      } catch (IOException e) {
        throw new IllegalArgumentException("bad TLS settings: " + e.getMessage(), e);
      }
      creds = b.build();
    } else {
      creds = InsecureChannelCredentials.create();
    }
    return token == null ? creds : CompositeChannelCredentials.create(creds, token);
  }

  @Override
  public String toString() {
    return "Security[ca=" + (caPem != null) + ", cert=" + (certPem != null) + ", token=" + (token != null)
        + ", serverName=" + serverName + "]";
  }

  /** Builds {@link Security}. Each PEM may be given as bytes or as a file. */
  public static final class Builder {
    private byte[] caPem;
    private byte[] certPem;
    private byte[] keyPem;
    private BearerToken token;
    private String serverName;

    private Builder() {}

    private static byte[] read(Path p) {
      try {
        return Files.readAllBytes(p);
      } catch (IOException e) {
        throw new UncheckedIOException("cannot read " + p, e);
      }
    }

    /** The CA certificate(s) that signed the server's certificate, PEM. Without, the system's roots. */
    public Builder ca(byte[] pem) {
      this.caPem = pem.clone();
      return this;
    }

    /** {@link #ca(byte[])} from a PEM file. */
    public Builder caFile(Path file) {
      this.caPem = read(file);
      return this;
    }

    /** This client's certificate and its private key (PKCS#8), PEM, for mutual TLS. */
    public Builder clientCertificate(byte[] certPem, byte[] keyPem) {
      this.certPem = certPem.clone();
      this.keyPem = keyPem.clone();
      return this;
    }

    /** {@link #clientCertificate(byte[], byte[])} from PEM files. */
    public Builder clientCertificate(Path certFile, Path keyFile) {
      return clientCertificate(read(certFile), read(keyFile));
    }

    /** A bearer secret of a principal in the server's policy, sent as {@code authorization: Bearer ...}. */
    public Builder token(String secret) {
      this.token = BearerToken.of(secret);
      return this;
    }

    /** The name the server's certificate must carry; default: the target's host. */
    public Builder serverName(String name) {
      this.serverName = name;
      return this;
    }

    public Security build() {
      return new Security(this);
    }
  }
}
