package dev.leasehold.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@io.grpc.stub.annotations.GrpcGenerated
public final class ChaosGrpc {

  private ChaosGrpc() {}

  public static final java.lang.String SERVICE_NAME = "leasehold.v1.Chaos";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosJobRequest,
      dev.leasehold.v1.ChaosResponse> getExpireMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Expire",
      requestType = dev.leasehold.v1.ChaosJobRequest.class,
      responseType = dev.leasehold.v1.ChaosResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosJobRequest,
      dev.leasehold.v1.ChaosResponse> getExpireMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosJobRequest, dev.leasehold.v1.ChaosResponse> getExpireMethod;
    if ((getExpireMethod = ChaosGrpc.getExpireMethod) == null) {
      synchronized (ChaosGrpc.class) {
        if ((getExpireMethod = ChaosGrpc.getExpireMethod) == null) {
          ChaosGrpc.getExpireMethod = getExpireMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ChaosJobRequest, dev.leasehold.v1.ChaosResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Expire"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosJobRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ChaosMethodDescriptorSupplier("Expire"))
              .build();
        }
      }
    }
    return getExpireMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosPauseRequest,
      dev.leasehold.v1.ChaosResponse> getPauseMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Pause",
      requestType = dev.leasehold.v1.ChaosPauseRequest.class,
      responseType = dev.leasehold.v1.ChaosResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosPauseRequest,
      dev.leasehold.v1.ChaosResponse> getPauseMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosPauseRequest, dev.leasehold.v1.ChaosResponse> getPauseMethod;
    if ((getPauseMethod = ChaosGrpc.getPauseMethod) == null) {
      synchronized (ChaosGrpc.class) {
        if ((getPauseMethod = ChaosGrpc.getPauseMethod) == null) {
          ChaosGrpc.getPauseMethod = getPauseMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ChaosPauseRequest, dev.leasehold.v1.ChaosResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Pause"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosPauseRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ChaosMethodDescriptorSupplier("Pause"))
              .build();
        }
      }
    }
    return getPauseMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosDelayRequest,
      dev.leasehold.v1.ChaosResponse> getDelayMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Delay",
      requestType = dev.leasehold.v1.ChaosDelayRequest.class,
      responseType = dev.leasehold.v1.ChaosResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosDelayRequest,
      dev.leasehold.v1.ChaosResponse> getDelayMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosDelayRequest, dev.leasehold.v1.ChaosResponse> getDelayMethod;
    if ((getDelayMethod = ChaosGrpc.getDelayMethod) == null) {
      synchronized (ChaosGrpc.class) {
        if ((getDelayMethod = ChaosGrpc.getDelayMethod) == null) {
          ChaosGrpc.getDelayMethod = getDelayMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ChaosDelayRequest, dev.leasehold.v1.ChaosResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Delay"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosDelayRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ChaosMethodDescriptorSupplier("Delay"))
              .build();
        }
      }
    }
    return getDelayMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosFenceRequest,
      dev.leasehold.v1.ChaosResponse> getFenceMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Fence",
      requestType = dev.leasehold.v1.ChaosFenceRequest.class,
      responseType = dev.leasehold.v1.ChaosResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosFenceRequest,
      dev.leasehold.v1.ChaosResponse> getFenceMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosFenceRequest, dev.leasehold.v1.ChaosResponse> getFenceMethod;
    if ((getFenceMethod = ChaosGrpc.getFenceMethod) == null) {
      synchronized (ChaosGrpc.class) {
        if ((getFenceMethod = ChaosGrpc.getFenceMethod) == null) {
          ChaosGrpc.getFenceMethod = getFenceMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ChaosFenceRequest, dev.leasehold.v1.ChaosResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Fence"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosFenceRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ChaosMethodDescriptorSupplier("Fence"))
              .build();
        }
      }
    }
    return getFenceMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosJobRequest,
      dev.leasehold.v1.ChaosResponse> getTransferMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Transfer",
      requestType = dev.leasehold.v1.ChaosJobRequest.class,
      responseType = dev.leasehold.v1.ChaosResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosJobRequest,
      dev.leasehold.v1.ChaosResponse> getTransferMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosJobRequest, dev.leasehold.v1.ChaosResponse> getTransferMethod;
    if ((getTransferMethod = ChaosGrpc.getTransferMethod) == null) {
      synchronized (ChaosGrpc.class) {
        if ((getTransferMethod = ChaosGrpc.getTransferMethod) == null) {
          ChaosGrpc.getTransferMethod = getTransferMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ChaosJobRequest, dev.leasehold.v1.ChaosResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Transfer"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosJobRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ChaosMethodDescriptorSupplier("Transfer"))
              .build();
        }
      }
    }
    return getTransferMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosClearRequest,
      dev.leasehold.v1.ChaosResponse> getClearMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Clear",
      requestType = dev.leasehold.v1.ChaosClearRequest.class,
      responseType = dev.leasehold.v1.ChaosResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosClearRequest,
      dev.leasehold.v1.ChaosResponse> getClearMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ChaosClearRequest, dev.leasehold.v1.ChaosResponse> getClearMethod;
    if ((getClearMethod = ChaosGrpc.getClearMethod) == null) {
      synchronized (ChaosGrpc.class) {
        if ((getClearMethod = ChaosGrpc.getClearMethod) == null) {
          ChaosGrpc.getClearMethod = getClearMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ChaosClearRequest, dev.leasehold.v1.ChaosResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Clear"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosClearRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ChaosResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ChaosMethodDescriptorSupplier("Clear"))
              .build();
        }
      }
    }
    return getClearMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static ChaosStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ChaosStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ChaosStub>() {
        @java.lang.Override
        public ChaosStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ChaosStub(channel, callOptions);
        }
      };
    return ChaosStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports all types of calls on the service
   */
  public static ChaosBlockingV2Stub newBlockingV2Stub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ChaosBlockingV2Stub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ChaosBlockingV2Stub>() {
        @java.lang.Override
        public ChaosBlockingV2Stub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ChaosBlockingV2Stub(channel, callOptions);
        }
      };
    return ChaosBlockingV2Stub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static ChaosBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ChaosBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ChaosBlockingStub>() {
        @java.lang.Override
        public ChaosBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ChaosBlockingStub(channel, callOptions);
        }
      };
    return ChaosBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static ChaosFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ChaosFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ChaosFutureStub>() {
        @java.lang.Override
        public ChaosFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ChaosFutureStub(channel, callOptions);
        }
      };
    return ChaosFutureStub.newStub(factory, channel);
  }

  /**
   */
  public interface AsyncService {

    /**
     * <pre>
     * Ends the job's live grant now, as an expiry would: the holder's next
     * Renew gets LEASE_LOST, its writes are fenced, and the first waiter is
     * granted the next token at once. The history records END_CHAOS. When
     * nobody holds the job nothing changes, and the answer's lease says so.
     * </pre>
     */
    default void expire(dev.leasehold.v1.ChaosJobRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getExpireMethod(), responseObserver);
    }

    /**
     * <pre>
     * Pauses the job's holder for `duration`, as a stalled process: every
     * Renew and KeepAlive renewal of that holder on the job is refused with
     * LEASE_LOST as if it came too late, so its grant runs out at its
     * deadline and goes to the first waiter; its Acquires on the job are
     * held until the pause ends. When nobody holds the job nothing changes.
     * </pre>
     */
    default void pause(dev.leasehold.v1.ChaosPauseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getPauseMethod(), responseObserver);
    }

    /**
     * <pre>
     * Delays every answer about the job (Acquire, Renew, Release,
     * TransferLease, GetLease, CheckedWrite, Read, ListKeys, KeepAlive
     * messages that renew it) by `by`, until cleared. At most 60 s.
     * </pre>
     */
    default void delay(dev.leasehold.v1.ChaosDelayRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDelayMethod(), responseObserver);
    }

    /**
     * <pre>
     * Refuses the job's next `writes` fenced writes (CheckedWrite and each
     * write of a WriteStream) as FENCED, whatever their token.
     * </pre>
     */
    default void fence(dev.leasehold.v1.ChaosFenceRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getFenceMethod(), responseObserver);
    }

    /**
     * <pre>
     * Hands the job's lease to its first waiter now, as a forced failover
     * (TransferLease on the holder's behalf; history END_TRANSFERRED).
     * FAILED_PRECONDITION with reason NO_SUCCESSOR when nobody waits.
     * </pre>
     */
    default void transfer(dev.leasehold.v1.ChaosJobRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getTransferMethod(), responseObserver);
    }

    /**
     * <pre>
     * Clears the chaos in force on `job`, or on every job when it is empty.
     * </pre>
     */
    default void clear(dev.leasehold.v1.ChaosClearRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getClearMethod(), responseObserver);
    }
  }

  /**
   * Base class for the server implementation of the service Chaos.
   */
  public static abstract class ChaosImplBase
      implements io.grpc.BindableService, AsyncService {

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return ChaosGrpc.bindService(this);
    }
  }

  /**
   * A stub to allow clients to do asynchronous rpc calls to service Chaos.
   */
  public static final class ChaosStub
      extends io.grpc.stub.AbstractAsyncStub<ChaosStub> {
    private ChaosStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ChaosStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ChaosStub(channel, callOptions);
    }

    /**
     * <pre>
     * Ends the job's live grant now, as an expiry would: the holder's next
     * Renew gets LEASE_LOST, its writes are fenced, and the first waiter is
     * granted the next token at once. The history records END_CHAOS. When
     * nobody holds the job nothing changes, and the answer's lease says so.
     * </pre>
     */
    public void expire(dev.leasehold.v1.ChaosJobRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getExpireMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Pauses the job's holder for `duration`, as a stalled process: every
     * Renew and KeepAlive renewal of that holder on the job is refused with
     * LEASE_LOST as if it came too late, so its grant runs out at its
     * deadline and goes to the first waiter; its Acquires on the job are
     * held until the pause ends. When nobody holds the job nothing changes.
     * </pre>
     */
    public void pause(dev.leasehold.v1.ChaosPauseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getPauseMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Delays every answer about the job (Acquire, Renew, Release,
     * TransferLease, GetLease, CheckedWrite, Read, ListKeys, KeepAlive
     * messages that renew it) by `by`, until cleared. At most 60 s.
     * </pre>
     */
    public void delay(dev.leasehold.v1.ChaosDelayRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDelayMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Refuses the job's next `writes` fenced writes (CheckedWrite and each
     * write of a WriteStream) as FENCED, whatever their token.
     * </pre>
     */
    public void fence(dev.leasehold.v1.ChaosFenceRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getFenceMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Hands the job's lease to its first waiter now, as a forced failover
     * (TransferLease on the holder's behalf; history END_TRANSFERRED).
     * FAILED_PRECONDITION with reason NO_SUCCESSOR when nobody waits.
     * </pre>
     */
    public void transfer(dev.leasehold.v1.ChaosJobRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getTransferMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Clears the chaos in force on `job`, or on every job when it is empty.
     * </pre>
     */
    public void clear(dev.leasehold.v1.ChaosClearRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getClearMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * A stub to allow clients to do synchronous rpc calls to service Chaos.
   */
  public static final class ChaosBlockingV2Stub
      extends io.grpc.stub.AbstractBlockingStub<ChaosBlockingV2Stub> {
    private ChaosBlockingV2Stub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ChaosBlockingV2Stub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ChaosBlockingV2Stub(channel, callOptions);
    }

    /**
     * <pre>
     * Ends the job's live grant now, as an expiry would: the holder's next
     * Renew gets LEASE_LOST, its writes are fenced, and the first waiter is
     * granted the next token at once. The history records END_CHAOS. When
     * nobody holds the job nothing changes, and the answer's lease says so.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse expire(dev.leasehold.v1.ChaosJobRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getExpireMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Pauses the job's holder for `duration`, as a stalled process: every
     * Renew and KeepAlive renewal of that holder on the job is refused with
     * LEASE_LOST as if it came too late, so its grant runs out at its
     * deadline and goes to the first waiter; its Acquires on the job are
     * held until the pause ends. When nobody holds the job nothing changes.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse pause(dev.leasehold.v1.ChaosPauseRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getPauseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Delays every answer about the job (Acquire, Renew, Release,
     * TransferLease, GetLease, CheckedWrite, Read, ListKeys, KeepAlive
     * messages that renew it) by `by`, until cleared. At most 60 s.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse delay(dev.leasehold.v1.ChaosDelayRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getDelayMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Refuses the job's next `writes` fenced writes (CheckedWrite and each
     * write of a WriteStream) as FENCED, whatever their token.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse fence(dev.leasehold.v1.ChaosFenceRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getFenceMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Hands the job's lease to its first waiter now, as a forced failover
     * (TransferLease on the holder's behalf; history END_TRANSFERRED).
     * FAILED_PRECONDITION with reason NO_SUCCESSOR when nobody waits.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse transfer(dev.leasehold.v1.ChaosJobRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getTransferMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Clears the chaos in force on `job`, or on every job when it is empty.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse clear(dev.leasehold.v1.ChaosClearRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getClearMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do limited synchronous rpc calls to service Chaos.
   */
  public static final class ChaosBlockingStub
      extends io.grpc.stub.AbstractBlockingStub<ChaosBlockingStub> {
    private ChaosBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ChaosBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ChaosBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Ends the job's live grant now, as an expiry would: the holder's next
     * Renew gets LEASE_LOST, its writes are fenced, and the first waiter is
     * granted the next token at once. The history records END_CHAOS. When
     * nobody holds the job nothing changes, and the answer's lease says so.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse expire(dev.leasehold.v1.ChaosJobRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getExpireMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Pauses the job's holder for `duration`, as a stalled process: every
     * Renew and KeepAlive renewal of that holder on the job is refused with
     * LEASE_LOST as if it came too late, so its grant runs out at its
     * deadline and goes to the first waiter; its Acquires on the job are
     * held until the pause ends. When nobody holds the job nothing changes.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse pause(dev.leasehold.v1.ChaosPauseRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getPauseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Delays every answer about the job (Acquire, Renew, Release,
     * TransferLease, GetLease, CheckedWrite, Read, ListKeys, KeepAlive
     * messages that renew it) by `by`, until cleared. At most 60 s.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse delay(dev.leasehold.v1.ChaosDelayRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDelayMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Refuses the job's next `writes` fenced writes (CheckedWrite and each
     * write of a WriteStream) as FENCED, whatever their token.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse fence(dev.leasehold.v1.ChaosFenceRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getFenceMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Hands the job's lease to its first waiter now, as a forced failover
     * (TransferLease on the holder's behalf; history END_TRANSFERRED).
     * FAILED_PRECONDITION with reason NO_SUCCESSOR when nobody waits.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse transfer(dev.leasehold.v1.ChaosJobRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getTransferMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Clears the chaos in force on `job`, or on every job when it is empty.
     * </pre>
     */
    public dev.leasehold.v1.ChaosResponse clear(dev.leasehold.v1.ChaosClearRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getClearMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do ListenableFuture-style rpc calls to service Chaos.
   */
  public static final class ChaosFutureStub
      extends io.grpc.stub.AbstractFutureStub<ChaosFutureStub> {
    private ChaosFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ChaosFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ChaosFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Ends the job's live grant now, as an expiry would: the holder's next
     * Renew gets LEASE_LOST, its writes are fenced, and the first waiter is
     * granted the next token at once. The history records END_CHAOS. When
     * nobody holds the job nothing changes, and the answer's lease says so.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ChaosResponse> expire(
        dev.leasehold.v1.ChaosJobRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getExpireMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Pauses the job's holder for `duration`, as a stalled process: every
     * Renew and KeepAlive renewal of that holder on the job is refused with
     * LEASE_LOST as if it came too late, so its grant runs out at its
     * deadline and goes to the first waiter; its Acquires on the job are
     * held until the pause ends. When nobody holds the job nothing changes.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ChaosResponse> pause(
        dev.leasehold.v1.ChaosPauseRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getPauseMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Delays every answer about the job (Acquire, Renew, Release,
     * TransferLease, GetLease, CheckedWrite, Read, ListKeys, KeepAlive
     * messages that renew it) by `by`, until cleared. At most 60 s.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ChaosResponse> delay(
        dev.leasehold.v1.ChaosDelayRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDelayMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Refuses the job's next `writes` fenced writes (CheckedWrite and each
     * write of a WriteStream) as FENCED, whatever their token.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ChaosResponse> fence(
        dev.leasehold.v1.ChaosFenceRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getFenceMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Hands the job's lease to its first waiter now, as a forced failover
     * (TransferLease on the holder's behalf; history END_TRANSFERRED).
     * FAILED_PRECONDITION with reason NO_SUCCESSOR when nobody waits.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ChaosResponse> transfer(
        dev.leasehold.v1.ChaosJobRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getTransferMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Clears the chaos in force on `job`, or on every job when it is empty.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ChaosResponse> clear(
        dev.leasehold.v1.ChaosClearRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getClearMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_EXPIRE = 0;
  private static final int METHODID_PAUSE = 1;
  private static final int METHODID_DELAY = 2;
  private static final int METHODID_FENCE = 3;
  private static final int METHODID_TRANSFER = 4;
  private static final int METHODID_CLEAR = 5;

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
        case METHODID_EXPIRE:
          serviceImpl.expire((dev.leasehold.v1.ChaosJobRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse>) responseObserver);
          break;
        case METHODID_PAUSE:
          serviceImpl.pause((dev.leasehold.v1.ChaosPauseRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse>) responseObserver);
          break;
        case METHODID_DELAY:
          serviceImpl.delay((dev.leasehold.v1.ChaosDelayRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse>) responseObserver);
          break;
        case METHODID_FENCE:
          serviceImpl.fence((dev.leasehold.v1.ChaosFenceRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse>) responseObserver);
          break;
        case METHODID_TRANSFER:
          serviceImpl.transfer((dev.leasehold.v1.ChaosJobRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse>) responseObserver);
          break;
        case METHODID_CLEAR:
          serviceImpl.clear((dev.leasehold.v1.ChaosClearRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ChaosResponse>) responseObserver);
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
        default:
          throw new AssertionError();
      }
    }
  }

  public static final io.grpc.ServerServiceDefinition bindService(AsyncService service) {
    return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
        .addMethod(
          getExpireMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ChaosJobRequest,
              dev.leasehold.v1.ChaosResponse>(
                service, METHODID_EXPIRE)))
        .addMethod(
          getPauseMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ChaosPauseRequest,
              dev.leasehold.v1.ChaosResponse>(
                service, METHODID_PAUSE)))
        .addMethod(
          getDelayMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ChaosDelayRequest,
              dev.leasehold.v1.ChaosResponse>(
                service, METHODID_DELAY)))
        .addMethod(
          getFenceMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ChaosFenceRequest,
              dev.leasehold.v1.ChaosResponse>(
                service, METHODID_FENCE)))
        .addMethod(
          getTransferMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ChaosJobRequest,
              dev.leasehold.v1.ChaosResponse>(
                service, METHODID_TRANSFER)))
        .addMethod(
          getClearMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ChaosClearRequest,
              dev.leasehold.v1.ChaosResponse>(
                service, METHODID_CLEAR)))
        .build();
  }

  private static abstract class ChaosBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    ChaosBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.leasehold.v1.ChaosOuterClass.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Chaos");
    }
  }

  private static final class ChaosFileDescriptorSupplier
      extends ChaosBaseDescriptorSupplier {
    ChaosFileDescriptorSupplier() {}
  }

  private static final class ChaosMethodDescriptorSupplier
      extends ChaosBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final java.lang.String methodName;

    ChaosMethodDescriptorSupplier(java.lang.String methodName) {
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
      synchronized (ChaosGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new ChaosFileDescriptorSupplier())
              .addMethod(getExpireMethod())
              .addMethod(getPauseMethod())
              .addMethod(getDelayMethod())
              .addMethod(getFenceMethod())
              .addMethod(getTransferMethod())
              .addMethod(getClearMethod())
              .build();
        }
      }
    }
    return result;
  }
}
