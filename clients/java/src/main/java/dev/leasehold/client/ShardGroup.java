package dev.leasehold.client;

import java.util.List;
import java.util.Optional;

/**
 * A shard group, from {@link Client#getGroup}: its count of shards, its
 * live members and who owns each shard.
 *
 * @param group the group
 * @param shards its count of shards; 0 when it has none (never joined)
 * @param members its live members, by member identity
 * @param owners every shard, in order, with its owner if any
 */
public record ShardGroup(String group, int shards, List<Member> members, List<Owner> owners) {
  public ShardGroup {
    members = List.copyOf(members);
    owners = List.copyOf(owners);
  }

  /**
   * A live member.
   *
   * @param member its identity as it joined ({@link ShardMember#member()}, {@code name@uuid})
   * @param shards the shards it owns, in order
   */
  public record Member(String member, List<Integer> shards) {
    public Member {
      shards = List.copyOf(shards);
    }
  }

  /**
   * One shard and its owner.
   *
   * @param shard the shard
   * @param job its job, {@code "{group}/{shard}"}
   * @param member its owner, or null when none
   * @param token its newest token (unsigned); 0 when never owned
   */
  public record Owner(int shard, String job, String member, long token) {}

  /** The live member {@code member}, if it is one. */
  public Optional<Member> member(String member) {
    return members.stream().filter(m -> m.member().equals(member)).findFirst();
  }

  static ShardGroup fromProto(dev.leasehold.v1.ShardGroup g) {
    return new ShardGroup(g.getGroup(), g.getShards(),
        g.getMembersList().stream().map(m -> new Member(m.getMember(), m.getShardsList())).toList(),
        g.getOwnersList().stream().map(o -> new Owner(o.getShard(), o.getJob(),
            o.getMember().isEmpty() ? null : o.getMember(), o.getToken())).toList());
  }
}
