package dev.leasehold.client;

/**
 * One shard of a group, as a {@link ShardMember} owns it (or owned it: a
 * revoke or a loss names the token it was owned with).
 *
 * @param shard the shard, 0 to N-1
 * @param token its fencing token (unsigned) while this member owns it: write
 *     under {@link #job()} with it, so that a stale owner is fenced
 * @param job its job, {@code "{group}/{shard}"}: an ordinary job with its
 *     own lease, tokens, history and fenced keys
 */
public record Shard(int shard, long token, String job) {
  static Shard fromProto(dev.leasehold.v1.JoinResponse r) {
    return new Shard(r.getShard(), r.getToken(), r.getJob());
  }
}
