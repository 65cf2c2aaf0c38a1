package dev.leasehold.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * Shards spreads the N shards of a group (units of work, such as the
 * partitions of a queue) over the group's live members, one owner per
 * shard, balanced, and moves them with no gap and no double owner.
 * Each shard is an ordinary job, named "{group}/{shard}" (shard 0 to N-1),
 * with its own lease, tokens, history and fenced keys: a shard's owner
 * holds its lease, and its writes under that job are fenced by the
 * shard's token, so a stale owner's writes are refused. A member is shown
 * as the live lease of the job "{group}/member/{member}". The group's
 * count of shards is kept under the group's own job, fenced key "shards".
 * </pre>
 */
@io.grpc.stub.annotations.GrpcGenerated
public final class ShardsGrpc {

  private ShardsGrpc() {}

  public static final java.lang.String SERVICE_NAME = "leasehold.v1.Shards";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.JoinRequest,
      dev.leasehold.v1.JoinResponse> getJoinMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Join",
      requestType = dev.leasehold.v1.JoinRequest.class,
      responseType = dev.leasehold.v1.JoinResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.JoinRequest,
      dev.leasehold.v1.JoinResponse> getJoinMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.JoinRequest, dev.leasehold.v1.JoinResponse> getJoinMethod;
    if ((getJoinMethod = ShardsGrpc.getJoinMethod) == null) {
      synchronized (ShardsGrpc.class) {
        if ((getJoinMethod = ShardsGrpc.getJoinMethod) == null) {
          ShardsGrpc.getJoinMethod = getJoinMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.JoinRequest, dev.leasehold.v1.JoinResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Join"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.JoinRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.JoinResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ShardsMethodDescriptorSupplier("Join"))
              .build();
        }
      }
    }
    return getJoinMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.GetGroupRequest,
      dev.leasehold.v1.ShardGroup> getGetGroupMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetGroup",
      requestType = dev.leasehold.v1.GetGroupRequest.class,
      responseType = dev.leasehold.v1.ShardGroup.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.GetGroupRequest,
      dev.leasehold.v1.ShardGroup> getGetGroupMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.GetGroupRequest, dev.leasehold.v1.ShardGroup> getGetGroupMethod;
    if ((getGetGroupMethod = ShardsGrpc.getGetGroupMethod) == null) {
      synchronized (ShardsGrpc.class) {
        if ((getGetGroupMethod = ShardsGrpc.getGetGroupMethod) == null) {
          ShardsGrpc.getGetGroupMethod = getGetGroupMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.GetGroupRequest, dev.leasehold.v1.ShardGroup>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetGroup"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.GetGroupRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ShardGroup.getDefaultInstance()))
              .setSchemaDescriptor(new ShardsMethodDescriptorSupplier("GetGroup"))
              .build();
        }
      }
    }
    return getGetGroupMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static ShardsStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ShardsStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ShardsStub>() {
        @java.lang.Override
        public ShardsStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ShardsStub(channel, callOptions);
        }
      };
    return ShardsStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports all types of calls on the service
   */
  public static ShardsBlockingV2Stub newBlockingV2Stub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ShardsBlockingV2Stub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ShardsBlockingV2Stub>() {
        @java.lang.Override
        public ShardsBlockingV2Stub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ShardsBlockingV2Stub(channel, callOptions);
        }
      };
    return ShardsBlockingV2Stub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static ShardsBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ShardsBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ShardsBlockingStub>() {
        @java.lang.Override
        public ShardsBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ShardsBlockingStub(channel, callOptions);
        }
      };
    return ShardsBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static ShardsFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ShardsFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ShardsFutureStub>() {
        @java.lang.Override
        public ShardsFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ShardsFutureStub(channel, callOptions);
        }
      };
    return ShardsFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * Shards spreads the N shards of a group (units of work, such as the
   * partitions of a queue) over the group's live members, one owner per
   * shard, balanced, and moves them with no gap and no double owner.
   * Each shard is an ordinary job, named "{group}/{shard}" (shard 0 to N-1),
   * with its own lease, tokens, history and fenced keys: a shard's owner
   * holds its lease, and its writes under that job are fenced by the
   * shard's token, so a stale owner's writes are refused. A member is shown
   * as the live lease of the job "{group}/member/{member}". The group's
   * count of shards is kept under the group's own job, fenced key "shards".
   * </pre>
   */
  public interface AsyncService {

    /**
     * <pre>
     * Join makes `member` a member of `group` for as long as the stream
     * lives. The first message names the group, the member and the group's
     * count of shards; the server answers JOINED, then streams the member's
     * assignment: ASSIGNED for each shard it is given (with the shard's
     * token), REVOKED when a shard is to move to another member, LOST when
     * a shard's holding ended without a revoke (it ran out).
     * Balance: every live member owns floor(N/M) or ceil(N/M) of the N
     * shards (M members), and a join or a leave moves as few shards as it
     * can. A move is a handover: the owner is sent REVOKED, stops the
     * shard's work, and acknowledges in `released` (or misses the revoke's
     * deadline); the shard then goes, in one decision, to the member
     * waiting for it, with the next token.
     * Every message the member sends renews its holdings, as a KeepAlive
     * would: send one (empty if there is nothing to acknowledge) every
     * ttl/3. A member whose stream ends (it left, or its process died and
     * its connection closed) frees its shards at once, to the members
     * waiting for them. A member that goes silent keeps them until its TTL
     * runs out. Nothing is freed when the server shuts down: a member
     * joining again under the same `member` takes its shards back.
     * Errors: INVALID_ARGUMENT naming the field (`group`, `member`,
     * `shards`, `ttl`, `revoke_timeout`, `released`) for bad input, and
     * naming `shards` with the group's count when the group has another
     * count. A Join under a `member` that is live on another stream takes
     * its place (a member that reconnects before its old connection was
     * seen to close): the older stream ends with FAILED_PRECONDITION,
     * reason LEASE_LOST, and frees nothing. With a policy, this is action
     * `lease` on the shards' jobs and the member's job.
     * </pre>
     */
    default io.grpc.stub.StreamObserver<dev.leasehold.v1.JoinRequest> join(
        io.grpc.stub.StreamObserver<dev.leasehold.v1.JoinResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getJoinMethod(), responseObserver);
    }

    /**
     * <pre>
     * GetGroup shows a group: its count of shards, its live members and
     * who owns each shard. A group never joined has no count (`shards` 0).
     * With a policy, this is action `read` on the group's job.
     * </pre>
     */
    default void getGroup(dev.leasehold.v1.GetGroupRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ShardGroup> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetGroupMethod(), responseObserver);
    }
  }

  /**
   * Base class for the server implementation of the service Shards.
   * <pre>
   * Shards spreads the N shards of a group (units of work, such as the
   * partitions of a queue) over the group's live members, one owner per
   * shard, balanced, and moves them with no gap and no double owner.
   * Each shard is an ordinary job, named "{group}/{shard}" (shard 0 to N-1),
   * with its own lease, tokens, history and fenced keys: a shard's owner
   * holds its lease, and its writes under that job are fenced by the
   * shard's token, so a stale owner's writes are refused. A member is shown
   * as the live lease of the job "{group}/member/{member}". The group's
   * count of shards is kept under the group's own job, fenced key "shards".
   * </pre>
   */
  public static abstract class ShardsImplBase
      implements io.grpc.BindableService, AsyncService {

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return ShardsGrpc.bindService(this);
    }
  }

  /**
   * A stub to allow clients to do asynchronous rpc calls to service Shards.
   * <pre>
   * Shards spreads the N shards of a group (units of work, such as the
   * partitions of a queue) over the group's live members, one owner per
   * shard, balanced, and moves them with no gap and no double owner.
   * Each shard is an ordinary job, named "{group}/{shard}" (shard 0 to N-1),
   * with its own lease, tokens, history and fenced keys: a shard's owner
   * holds its lease, and its writes under that job are fenced by the
   * shard's token, so a stale owner's writes are refused. A member is shown
   * as the live lease of the job "{group}/member/{member}". The group's
   * count of shards is kept under the group's own job, fenced key "shards".
   * </pre>
   */
  public static final class ShardsStub
      extends io.grpc.stub.AbstractAsyncStub<ShardsStub> {
    private ShardsStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ShardsStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ShardsStub(channel, callOptions);
    }

    /**
     * <pre>
     * Join makes `member` a member of `group` for as long as the stream
     * lives. The first message names the group, the member and the group's
     * count of shards; the server answers JOINED, then streams the member's
     * assignment: ASSIGNED for each shard it is given (with the shard's
     * token), REVOKED when a shard is to move to another member, LOST when
     * a shard's holding ended without a revoke (it ran out).
     * Balance: every live member owns floor(N/M) or ceil(N/M) of the N
     * shards (M members), and a join or a leave moves as few shards as it
     * can. A move is a handover: the owner is sent REVOKED, stops the
     * shard's work, and acknowledges in `released` (or misses the revoke's
     * deadline); the shard then goes, in one decision, to the member
     * waiting for it, with the next token.
     * Every message the member sends renews its holdings, as a KeepAlive
     * would: send one (empty if there is nothing to acknowledge) every
     * ttl/3. A member whose stream ends (it left, or its process died and
     * its connection closed) frees its shards at once, to the members
     * waiting for them. A member that goes silent keeps them until its TTL
     * runs out. Nothing is freed when the server shuts down: a member
     * joining again under the same `member` takes its shards back.
     * Errors: INVALID_ARGUMENT naming the field (`group`, `member`,
     * `shards`, `ttl`, `revoke_timeout`, `released`) for bad input, and
     * naming `shards` with the group's count when the group has another
     * count. A Join under a `member` that is live on another stream takes
     * its place (a member that reconnects before its old connection was
     * seen to close): the older stream ends with FAILED_PRECONDITION,
     * reason LEASE_LOST, and frees nothing. With a policy, this is action
     * `lease` on the shards' jobs and the member's job.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<dev.leasehold.v1.JoinRequest> join(
        io.grpc.stub.StreamObserver<dev.leasehold.v1.JoinResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getJoinMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * GetGroup shows a group: its count of shards, its live members and
     * who owns each shard. A group never joined has no count (`shards` 0).
     * With a policy, this is action `read` on the group's job.
     * </pre>
     */
    public void getGroup(dev.leasehold.v1.GetGroupRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ShardGroup> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetGroupMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * A stub to allow clients to do synchronous rpc calls to service Shards.
   * <pre>
   * Shards spreads the N shards of a group (units of work, such as the
   * partitions of a queue) over the group's live members, one owner per
   * shard, balanced, and moves them with no gap and no double owner.
   * Each shard is an ordinary job, named "{group}/{shard}" (shard 0 to N-1),
   * with its own lease, tokens, history and fenced keys: a shard's owner
   * holds its lease, and its writes under that job are fenced by the
   * shard's token, so a stale owner's writes are refused. A member is shown
   * as the live lease of the job "{group}/member/{member}". The group's
   * count of shards is kept under the group's own job, fenced key "shards".
   * </pre>
   */
  public static final class ShardsBlockingV2Stub
      extends io.grpc.stub.AbstractBlockingStub<ShardsBlockingV2Stub> {
    private ShardsBlockingV2Stub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ShardsBlockingV2Stub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ShardsBlockingV2Stub(channel, callOptions);
    }

    /**
     * <pre>
     * Join makes `member` a member of `group` for as long as the stream
     * lives. The first message names the group, the member and the group's
     * count of shards; the server answers JOINED, then streams the member's
     * assignment: ASSIGNED for each shard it is given (with the shard's
     * token), REVOKED when a shard is to move to another member, LOST when
     * a shard's holding ended without a revoke (it ran out).
     * Balance: every live member owns floor(N/M) or ceil(N/M) of the N
     * shards (M members), and a join or a leave moves as few shards as it
     * can. A move is a handover: the owner is sent REVOKED, stops the
     * shard's work, and acknowledges in `released` (or misses the revoke's
     * deadline); the shard then goes, in one decision, to the member
     * waiting for it, with the next token.
     * Every message the member sends renews its holdings, as a KeepAlive
     * would: send one (empty if there is nothing to acknowledge) every
     * ttl/3. A member whose stream ends (it left, or its process died and
     * its connection closed) frees its shards at once, to the members
     * waiting for them. A member that goes silent keeps them until its TTL
     * runs out. Nothing is freed when the server shuts down: a member
     * joining again under the same `member` takes its shards back.
     * Errors: INVALID_ARGUMENT naming the field (`group`, `member`,
     * `shards`, `ttl`, `revoke_timeout`, `released`) for bad input, and
     * naming `shards` with the group's count when the group has another
     * count. A Join under a `member` that is live on another stream takes
     * its place (a member that reconnects before its old connection was
     * seen to close): the older stream ends with FAILED_PRECONDITION,
     * reason LEASE_LOST, and frees nothing. With a policy, this is action
     * `lease` on the shards' jobs and the member's job.
     * </pre>
     */
    @io.grpc.ExperimentalApi("https://github.com/grpc/grpc-java/issues/10918")
    public io.grpc.stub.BlockingClientCall<dev.leasehold.v1.JoinRequest, dev.leasehold.v1.JoinResponse>
        join() {
      return io.grpc.stub.ClientCalls.blockingBidiStreamingCall(
          getChannel(), getJoinMethod(), getCallOptions());
    }

    /**
     * <pre>
     * GetGroup shows a group: its count of shards, its live members and
     * who owns each shard. A group never joined has no count (`shards` 0).
     * With a policy, this is action `read` on the group's job.
     * </pre>
     */
    public dev.leasehold.v1.ShardGroup getGroup(dev.leasehold.v1.GetGroupRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getGetGroupMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do limited synchronous rpc calls to service Shards.
   * <pre>
   * Shards spreads the N shards of a group (units of work, such as the
   * partitions of a queue) over the group's live members, one owner per
   * shard, balanced, and moves them with no gap and no double owner.
   * Each shard is an ordinary job, named "{group}/{shard}" (shard 0 to N-1),
   * with its own lease, tokens, history and fenced keys: a shard's owner
   * holds its lease, and its writes under that job are fenced by the
   * shard's token, so a stale owner's writes are refused. A member is shown
   * as the live lease of the job "{group}/member/{member}". The group's
   * count of shards is kept under the group's own job, fenced key "shards".
   * </pre>
   */
  public static final class ShardsBlockingStub
      extends io.grpc.stub.AbstractBlockingStub<ShardsBlockingStub> {
    private ShardsBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ShardsBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ShardsBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * GetGroup shows a group: its count of shards, its live members and
     * who owns each shard. A group never joined has no count (`shards` 0).
     * With a policy, this is action `read` on the group's job.
     * </pre>
     */
    public dev.leasehold.v1.ShardGroup getGroup(dev.leasehold.v1.GetGroupRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetGroupMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do ListenableFuture-style rpc calls to service Shards.
   * <pre>
   * Shards spreads the N shards of a group (units of work, such as the
   * partitions of a queue) over the group's live members, one owner per
   * shard, balanced, and moves them with no gap and no double owner.
   * Each shard is an ordinary job, named "{group}/{shard}" (shard 0 to N-1),
   * with its own lease, tokens, history and fenced keys: a shard's owner
   * holds its lease, and its writes under that job are fenced by the
   * shard's token, so a stale owner's writes are refused. A member is shown
   * as the live lease of the job "{group}/member/{member}". The group's
   * count of shards is kept under the group's own job, fenced key "shards".
   * </pre>
   */
  public static final class ShardsFutureStub
      extends io.grpc.stub.AbstractFutureStub<ShardsFutureStub> {
    private ShardsFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ShardsFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ShardsFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * GetGroup shows a group: its count of shards, its live members and
     * who owns each shard. A group never joined has no count (`shards` 0).
     * With a policy, this is action `read` on the group's job.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ShardGroup> getGroup(
        dev.leasehold.v1.GetGroupRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetGroupMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_GET_GROUP = 0;
  private static final int METHODID_JOIN = 1;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final AsyncService serviceImpl;
    private final int methodId;

    MethodHandlers(AsyncService serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_GET_GROUP:
          serviceImpl.getGroup((dev.leasehold.v1.GetGroupRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ShardGroup>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_JOIN:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.join(
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.JoinResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  public static final io.grpc.ServerServiceDefinition bindService(AsyncService service) {
    return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
        .addMethod(
          getJoinMethod(),
          io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
            new MethodHandlers<
              dev.leasehold.v1.JoinRequest,
              dev.leasehold.v1.JoinResponse>(
                service, METHODID_JOIN)))
        .addMethod(
          getGetGroupMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.GetGroupRequest,
              dev.leasehold.v1.ShardGroup>(
                service, METHODID_GET_GROUP)))
        .build();
  }

  private static abstract class ShardsBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    ShardsBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.leasehold.v1.Leasehold.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Shards");
    }
  }

  private static final class ShardsFileDescriptorSupplier
      extends ShardsBaseDescriptorSupplier {
    ShardsFileDescriptorSupplier() {}
  }

  private static final class ShardsMethodDescriptorSupplier
      extends ShardsBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final java.lang.String methodName;

    ShardsMethodDescriptorSupplier(java.lang.String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (ShardsGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new ShardsFileDescriptorSupplier())
              .addMethod(getJoinMethod())
              .addMethod(getGetGroupMethod())
              .build();
        }
      }
    }
    return result;
  }
}
