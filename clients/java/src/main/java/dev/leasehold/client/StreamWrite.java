package dev.leasehold.client;

import com.google.protobuf.ByteString;
import dev.leasehold.v1.CheckedWriteRequest;
import java.nio.charset.StandardCharsets;
import java.util.Objects;

/**
 * One write on a {@link WriteStream}: the fields of {@code CheckedWrite}. Make
 * it with {@link #put} or {@link #delete}. The arrays are not copied until
 * {@link WriteStream#write} sends them: do not change them meanwhile.
 *
 * @param job the job whose token fences the key
 * @param token the writer's token (unsigned), from its grant
 * @param key the key
 * @param value the value, or null to delete the key
 */
public record StreamWrite(String job, long token, byte[] key, byte[] value) {
  /** Checks that {@code job} and {@code key} are given. */
  public StreamWrite {
    Objects.requireNonNull(job, "job");
    Objects.requireNonNull(key, "key");
  }

  /** Stores {@code value} under ({@code job}, {@code key}) with {@code token}. */
  public static StreamWrite put(String job, long token, byte[] key, byte[] value) {
    return new StreamWrite(job, token, key, Objects.requireNonNull(value, "value"));
  }

  /** {@link #put(String, long, byte[], byte[])} with a UTF-8 key and value. */
  public static StreamWrite put(String job, long token, String key, String value) {
    return put(job, token, key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
  }

  /** Deletes ({@code job}, {@code key}) with {@code token}. */
  public static StreamWrite delete(String job, long token, byte[] key) {
    return new StreamWrite(job, token, key, null);
  }

  /** {@link #delete(String, long, byte[])} with a UTF-8 key. */
  public static StreamWrite delete(String job, long token, String key) {
    return delete(job, token, key.getBytes(StandardCharsets.UTF_8));
  }

  /** Whether this write deletes the key. */
  public boolean isDelete() {
    return value == null;
  }

  CheckedWriteRequest toProto() {
    CheckedWriteRequest.Builder b = CheckedWriteRequest.newBuilder()
        .setJob(job).setToken(token).setKey(ByteString.copyFrom(key));
    return value == null ? b.setDelete(true).build() : b.setValue(ByteString.copyFrom(value)).build();
  }
}
