package dev.leasehold.client;

/**
 * Hears a {@link ShardMember}'s assignment as it changes. Called on the
 * member's one callback thread, in the order the server sent the events,
 * so a slow callback delays no heartbeat (it delays the member's later
 * events).
 */
public interface ShardListener {
  /** The member owns {@code shard} with {@link Shard#token()}: start its work. */
  void onAssigned(Shard shard);

  /**
   * {@code shard} is to move to another member: stop its work here. The
   * acknowledgement is sent once this returns (unless the member was built
   * with {@link ShardMember.Builder#manualAck(boolean)}: then call
   * {@link ShardMember#release(int)}); until then the shard is still ours
   * and its token still writes. A callback that throws sends none: the
   * shard moves at the revoke's deadline, and {@link #onLost} is heard.
   */
  void onRevoked(Shard shard);

  /**
   * The member no longer owns {@code shard} (it ran out, a revoke's
   * deadline passed, the stream broke, or the member is closing): stop
   * its work. Nothing is acknowledged.
   */
  default void onLost(Shard shard) {}

  /**
   * The membership ended with {@code error}, an error retrying cannot fix
   * (another stream joined as this member: {@link LeaseLostException}; a
   * policy refused it...). Every shard was reported lost first.
   */
  default void onError(LeaseholdException error) {}
}
