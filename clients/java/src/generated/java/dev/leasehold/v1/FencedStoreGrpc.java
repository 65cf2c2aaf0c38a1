package dev.leasehold.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * FencedStore keeps small values under (job, key), fenced by the job's
 * tokens: only the job's live leader can write.
 * </pre>
 */
@io.grpc.stub.annotations.GrpcGenerated
public final class FencedStoreGrpc {

  private FencedStoreGrpc() {}

  public static final java.lang.String SERVICE_NAME = "leasehold.v1.FencedStore";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.CheckedWriteRequest,
      dev.leasehold.v1.CheckedWriteResponse> getCheckedWriteMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CheckedWrite",
      requestType = dev.leasehold.v1.CheckedWriteRequest.class,
      responseType = dev.leasehold.v1.CheckedWriteResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.CheckedWriteRequest,
      dev.leasehold.v1.CheckedWriteResponse> getCheckedWriteMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.CheckedWriteRequest, dev.leasehold.v1.CheckedWriteResponse> getCheckedWriteMethod;
    if ((getCheckedWriteMethod = FencedStoreGrpc.getCheckedWriteMethod) == null) {
      synchronized (FencedStoreGrpc.class) {
        if ((getCheckedWriteMethod = FencedStoreGrpc.getCheckedWriteMethod) == null) {
          FencedStoreGrpc.getCheckedWriteMethod = getCheckedWriteMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.CheckedWriteRequest, dev.leasehold.v1.CheckedWriteResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CheckedWrite"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.CheckedWriteRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.CheckedWriteResponse.getDefaultInstance()))
              .setSchemaDescriptor(new FencedStoreMethodDescriptorSupplier("CheckedWrite"))
              .build();
        }
      }
    }
    return getCheckedWriteMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.WriteStreamRequest,
      dev.leasehold.v1.WriteStreamResponse> getWriteStreamMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "WriteStream",
      requestType = dev.leasehold.v1.WriteStreamRequest.class,
      responseType = dev.leasehold.v1.WriteStreamResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.WriteStreamRequest,
      dev.leasehold.v1.WriteStreamResponse> getWriteStreamMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.WriteStreamRequest, dev.leasehold.v1.WriteStreamResponse> getWriteStreamMethod;
    if ((getWriteStreamMethod = FencedStoreGrpc.getWriteStreamMethod) == null) {
      synchronized (FencedStoreGrpc.class) {
        if ((getWriteStreamMethod = FencedStoreGrpc.getWriteStreamMethod) == null) {
          FencedStoreGrpc.getWriteStreamMethod = getWriteStreamMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.WriteStreamRequest, dev.leasehold.v1.WriteStreamResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "WriteStream"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.WriteStreamRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.WriteStreamResponse.getDefaultInstance()))
              .setSchemaDescriptor(new FencedStoreMethodDescriptorSupplier("WriteStream"))
              .build();
        }
      }
    }
    return getWriteStreamMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ReadRequest,
      dev.leasehold.v1.ReadResponse> getReadMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Read",
      requestType = dev.leasehold.v1.ReadRequest.class,
      responseType = dev.leasehold.v1.ReadResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ReadRequest,
      dev.leasehold.v1.ReadResponse> getReadMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ReadRequest, dev.leasehold.v1.ReadResponse> getReadMethod;
    if ((getReadMethod = FencedStoreGrpc.getReadMethod) == null) {
      synchronized (FencedStoreGrpc.class) {
        if ((getReadMethod = FencedStoreGrpc.getReadMethod) == null) {
          FencedStoreGrpc.getReadMethod = getReadMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ReadRequest, dev.leasehold.v1.ReadResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Read"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ReadRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ReadResponse.getDefaultInstance()))
              .setSchemaDescriptor(new FencedStoreMethodDescriptorSupplier("Read"))
              .build();
        }
      }
    }
    return getReadMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ListKeysRequest,
      dev.leasehold.v1.ListKeysResponse> getListKeysMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListKeys",
      requestType = dev.leasehold.v1.ListKeysRequest.class,
      responseType = dev.leasehold.v1.ListKeysResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ListKeysRequest,
      dev.leasehold.v1.ListKeysResponse> getListKeysMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ListKeysRequest, dev.leasehold.v1.ListKeysResponse> getListKeysMethod;
    if ((getListKeysMethod = FencedStoreGrpc.getListKeysMethod) == null) {
      synchronized (FencedStoreGrpc.class) {
        if ((getListKeysMethod = FencedStoreGrpc.getListKeysMethod) == null) {
          FencedStoreGrpc.getListKeysMethod = getListKeysMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ListKeysRequest, dev.leasehold.v1.ListKeysResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListKeys"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ListKeysRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ListKeysResponse.getDefaultInstance()))
              .setSchemaDescriptor(new FencedStoreMethodDescriptorSupplier("ListKeys"))
              .build();
        }
      }
    }
    return getListKeysMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static FencedStoreStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<FencedStoreStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<FencedStoreStub>() {
        @java.lang.Override
        public FencedStoreStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new FencedStoreStub(channel, callOptions);
        }
      };
    return FencedStoreStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports all types of calls on the service
   */
  public static FencedStoreBlockingV2Stub newBlockingV2Stub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<FencedStoreBlockingV2Stub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<FencedStoreBlockingV2Stub>() {
        @java.lang.Override
        public FencedStoreBlockingV2Stub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new FencedStoreBlockingV2Stub(channel, callOptions);
        }
      };
    return FencedStoreBlockingV2Stub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static FencedStoreBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<FencedStoreBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<FencedStoreBlockingStub>() {
        @java.lang.Override
        public FencedStoreBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new FencedStoreBlockingStub(channel, callOptions);
        }
      };
    return FencedStoreBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static FencedStoreFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<FencedStoreFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<FencedStoreFutureStub>() {
        @java.lang.Override
        public FencedStoreFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new FencedStoreFutureStub(channel, callOptions);
        }
      };
    return FencedStoreFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * FencedStore keeps small values under (job, key), fenced by the job's
   * tokens: only the job's live leader can write.
   * </pre>
   */
  public interface AsyncService {

    /**
     * <pre>
     * CheckedWrite stores (or deletes) the value under (job, key). It is
     * accepted only when all of these hold at the moment of the write:
     * - `token` is the job's current token,
     * - the job's lease is live (held and not expired),
     * - `token` is &gt;= the highest token that has written this key.
     * A missing key is created. A stale token, or a lease that is no longer
     * live, fails with FAILED_PRECONDITION and reason FENCED, and the message
     * names the job's current token. A token the server never issued for the
     * job (zero, or above the current token) fails with INVALID_ARGUMENT.
     * Because the check is against the job's current token, a paused leader
     * that wakes up after its lease was granted to another holder is rejected
     * even before the new leader has written anything.
     * An accepted write is on stable storage before the reply.
     * </pre>
     */
    default void checkedWrite(dev.leasehold.v1.CheckedWriteRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.CheckedWriteResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCheckedWriteMethod(), responseObserver);
    }

    /**
     * <pre>
     * WriteStream carries many CheckedWrites over one long-lived
     * bidirectional stream: a leader that writes often sends each write (or
     * a batch of them) as one WriteStreamRequest and gets back one
     * WriteStreamResponse with a result per write, in the same order. A
     * message on an open stream costs far less than a unary call (no new
     * HTTP/2 stream, no headers), and the writes of one message share one
     * sync.
     * Each write follows exactly the rules of CheckedWrite, and each is
     * decided on its own, in the order of the message: a fenced or malformed
     * write does not stop the others, and a later write in the message sees
     * the earlier ones (two writes to one key give versions n and n+1).
     * Requests on one stream are decided and answered in the order they were
     * sent, one response per request; a client may send the next request
     * before the previous response arrives (up to 64 are decided ahead), and
     * requests sent back to back share syncs. **A response is sent only once
     * every write it reports as WRITTEN, and every token it names, is on
     * stable storage.**
     * The stream itself ends with a status only for what concerns all of it,
     * with the codes and reasons of CheckedWrite: INVALID_ARGUMENT (field
     * "writes") when one message carries more than 1000 writes or is larger
     * than the server's maximum message size (about 66 KiB by default: split
     * larger batches across messages; a write's field over its own limit is
     * named instead, e.g. "writes.value"), INVALID_ARGUMENT naming the field
     * when a message does not decode (e.g. "writes.job" is not UTF-8),
     * RESOURCE_EXHAUSTED with reason DISK_FULL on a full disk, UNAVAILABLE
     * with reason STORAGE when a sync failed, UNAVAILABLE with reason
     * SHUTTING_DOWN when the server stops. With a policy, also
     * PERMISSION_DENIED, as CheckedWrite, for a write the caller may not make
     * (no `write` grant on its job, or a token of a grant another principal
     * holds), and UNAUTHENTICATED or PERMISSION_DENIED when a policy reload
     * took the caller's grant while the stream was open. A message refused with
     * INVALID_ARGUMENT changes nothing: every message sent before it is
     * answered first, and nothing in it or after it is written. When the
     * stream ends with UNAVAILABLE or RESOURCE_EXHAUSTED, the writes of the
     * unanswered messages may or may not have been made: read them back.
     * Closing the sending side ends the stream, with OK, once every response
     * has been sent.
     * </pre>
     */
    default io.grpc.stub.StreamObserver<dev.leasehold.v1.WriteStreamRequest> writeStream(
        io.grpc.stub.StreamObserver<dev.leasehold.v1.WriteStreamResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getWriteStreamMethod(), responseObserver);
    }

    /**
     * <pre>
     * Read returns the value under (job, key). Reads are linearizable: a read
     * reflects every write acknowledged before it began.
     * </pre>
     */
    default void read(dev.leasehold.v1.ReadRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ReadResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReadMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListKeys lists the keys of a job, ordered by key bytes.
     * </pre>
     */
    default void listKeys(dev.leasehold.v1.ListKeysRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ListKeysResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListKeysMethod(), responseObserver);
    }
  }

  /**
   * Base class for the server implementation of the service FencedStore.
   * <pre>
   * FencedStore keeps small values under (job, key), fenced by the job's
   * tokens: only the job's live leader can write.
   * </pre>
   */
  public static abstract class FencedStoreImplBase
      implements io.grpc.BindableService, AsyncService {

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return FencedStoreGrpc.bindService(this);
    }
  }

  /**
   * A stub to allow clients to do asynchronous rpc calls to service FencedStore.
   * <pre>
   * FencedStore keeps small values under (job, key), fenced by the job's
   * tokens: only the job's live leader can write.
   * </pre>
   */
  public static final class FencedStoreStub
      extends io.grpc.stub.AbstractAsyncStub<FencedStoreStub> {
    private FencedStoreStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected FencedStoreStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new FencedStoreStub(channel, callOptions);
    }

    /**
     * <pre>
     * CheckedWrite stores (or deletes) the value under (job, key). It is
     * accepted only when all of these hold at the moment of the write:
     * - `token` is the job's current token,
     * - the job's lease is live (held and not expired),
     * - `token` is &gt;= the highest token that has written this key.
     * A missing key is created. A stale token, or a lease that is no longer
     * live, fails with FAILED_PRECONDITION and reason FENCED, and the message
     * names the job's current token. A token the server never issued for the
     * job (zero, or above the current token) fails with INVALID_ARGUMENT.
     * Because the check is against the job's current token, a paused leader
     * that wakes up after its lease was granted to another holder is rejected
     * even before the new leader has written anything.
     * An accepted write is on stable storage before the reply.
     * </pre>
     */
    public void checkedWrite(dev.leasehold.v1.CheckedWriteRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.CheckedWriteResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCheckedWriteMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * WriteStream carries many CheckedWrites over one long-lived
     * bidirectional stream: a leader that writes often sends each write (or
     * a batch of them) as one WriteStreamRequest and gets back one
     * WriteStreamResponse with a result per write, in the same order. A
     * message on an open stream costs far less than a unary call (no new
     * HTTP/2 stream, no headers), and the writes of one message share one
     * sync.
     * Each write follows exactly the rules of CheckedWrite, and each is
     * decided on its own, in the order of the message: a fenced or malformed
     * write does not stop the others, and a later write in the message sees
     * the earlier ones (two writes to one key give versions n and n+1).
     * Requests on one stream are decided and answered in the order they were
     * sent, one response per request; a client may send the next request
     * before the previous response arrives (up to 64 are decided ahead), and
     * requests sent back to back share syncs. **A response is sent only once
     * every write it reports as WRITTEN, and every token it names, is on
     * stable storage.**
     * The stream itself ends with a status only for what concerns all of it,
     * with the codes and reasons of CheckedWrite: INVALID_ARGUMENT (field
     * "writes") when one message carries more than 1000 writes or is larger
     * than the server's maximum message size (about 66 KiB by default: split
     * larger batches across messages; a write's field over its own limit is
     * named instead, e.g. "writes.value"), INVALID_ARGUMENT naming the field
     * when a message does not decode (e.g. "writes.job" is not UTF-8),
     * RESOURCE_EXHAUSTED with reason DISK_FULL on a full disk, UNAVAILABLE
     * with reason STORAGE when a sync failed, UNAVAILABLE with reason
     * SHUTTING_DOWN when the server stops. With a policy, also
     * PERMISSION_DENIED, as CheckedWrite, for a write the caller may not make
     * (no `write` grant on its job, or a token of a grant another principal
     * holds), and UNAUTHENTICATED or PERMISSION_DENIED when a policy reload
     * took the caller's grant while the stream was open. A message refused with
     * INVALID_ARGUMENT changes nothing: every message sent before it is
     * answered first, and nothing in it or after it is written. When the
     * stream ends with UNAVAILABLE or RESOURCE_EXHAUSTED, the writes of the
     * unanswered messages may or may not have been made: read them back.
     * Closing the sending side ends the stream, with OK, once every response
     * has been sent.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<dev.leasehold.v1.WriteStreamRequest> writeStream(
        io.grpc.stub.StreamObserver<dev.leasehold.v1.WriteStreamResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getWriteStreamMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * Read returns the value under (job, key). Reads are linearizable: a read
     * reflects every write acknowledged before it began.
     * </pre>
     */
    public void read(dev.leasehold.v1.ReadRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ReadResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReadMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListKeys lists the keys of a job, ordered by key bytes.
     * </pre>
     */
    public void listKeys(dev.leasehold.v1.ListKeysRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ListKeysResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListKeysMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * A stub to allow clients to do synchronous rpc calls to service FencedStore.
   * <pre>
   * FencedStore keeps small values under (job, key), fenced by the job's
   * tokens: only the job's live leader can write.
   * </pre>
   */
  public static final class FencedStoreBlockingV2Stub
      extends io.grpc.stub.AbstractBlockingStub<FencedStoreBlockingV2Stub> {
    private FencedStoreBlockingV2Stub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected FencedStoreBlockingV2Stub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new FencedStoreBlockingV2Stub(channel, callOptions);
    }

    /**
     * <pre>
     * CheckedWrite stores (or deletes) the value under (job, key). It is
     * accepted only when all of these hold at the moment of the write:
     * - `token` is the job's current token,
     * - the job's lease is live (held and not expired),
     * - `token` is &gt;= the highest token that has written this key.
     * A missing key is created. A stale token, or a lease that is no longer
     * live, fails with FAILED_PRECONDITION and reason FENCED, and the message
     * names the job's current token. A token the server never issued for the
     * job (zero, or above the current token) fails with INVALID_ARGUMENT.
     * Because the check is against the job's current token, a paused leader
     * that wakes up after its lease was granted to another holder is rejected
     * even before the new leader has written anything.
     * An accepted write is on stable storage before the reply.
     * </pre>
     */
    public dev.leasehold.v1.CheckedWriteResponse checkedWrite(dev.leasehold.v1.CheckedWriteRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getCheckedWriteMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * WriteStream carries many CheckedWrites over one long-lived
     * bidirectional stream: a leader that writes often sends each write (or
     * a batch of them) as one WriteStreamRequest and gets back one
     * WriteStreamResponse with a result per write, in the same order. A
     * message on an open stream costs far less than a unary call (no new
     * HTTP/2 stream, no headers), and the writes of one message share one
     * sync.
     * Each write follows exactly the rules of CheckedWrite, and each is
     * decided on its own, in the order of the message: a fenced or malformed
     * write does not stop the others, and a later write in the message sees
     * the earlier ones (two writes to one key give versions n and n+1).
     * Requests on one stream are decided and answered in the order they were
     * sent, one response per request; a client may send the next request
     * before the previous response arrives (up to 64 are decided ahead), and
     * requests sent back to back share syncs. **A response is sent only once
     * every write it reports as WRITTEN, and every token it names, is on
     * stable storage.**
     * The stream itself ends with a status only for what concerns all of it,
     * with the codes and reasons of CheckedWrite: INVALID_ARGUMENT (field
     * "writes") when one message carries more than 1000 writes or is larger
     * than the server's maximum message size (about 66 KiB by default: split
     * larger batches across messages; a write's field over its own limit is
     * named instead, e.g. "writes.value"), INVALID_ARGUMENT naming the field
     * when a message does not decode (e.g. "writes.job" is not UTF-8),
     * RESOURCE_EXHAUSTED with reason DISK_FULL on a full disk, UNAVAILABLE
     * with reason STORAGE when a sync failed, UNAVAILABLE with reason
     * SHUTTING_DOWN when the server stops. With a policy, also
     * PERMISSION_DENIED, as CheckedWrite, for a write the caller may not make
     * (no `write` grant on its job, or a token of a grant another principal
     * holds), and UNAUTHENTICATED or PERMISSION_DENIED when a policy reload
     * took the caller's grant while the stream was open. A message refused with
     * INVALID_ARGUMENT changes nothing: every message sent before it is
     * answered first, and nothing in it or after it is written. When the
     * stream ends with UNAVAILABLE or RESOURCE_EXHAUSTED, the writes of the
     * unanswered messages may or may not have been made: read them back.
     * Closing the sending side ends the stream, with OK, once every response
     * has been sent.
     * </pre>
     */
    @io.grpc.ExperimentalApi("https://github.com/grpc/grpc-java/issues/10918")
    public io.grpc.stub.BlockingClientCall<dev.leasehold.v1.WriteStreamRequest, dev.leasehold.v1.WriteStreamResponse>
        writeStream() {
      return io.grpc.stub.ClientCalls.blockingBidiStreamingCall(
          getChannel(), getWriteStreamMethod(), getCallOptions());
    }

    /**
     * <pre>
     * Read returns the value under (job, key). Reads are linearizable: a read
     * reflects every write acknowledged before it began.
     * </pre>
     */
    public dev.leasehold.v1.ReadResponse read(dev.leasehold.v1.ReadRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getReadMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListKeys lists the keys of a job, ordered by key bytes.
     * </pre>
     */
    public dev.leasehold.v1.ListKeysResponse listKeys(dev.leasehold.v1.ListKeysRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getListKeysMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do limited synchronous rpc calls to service FencedStore.
   * <pre>
   * FencedStore keeps small values under (job, key), fenced by the job's
   * tokens: only the job's live leader can write.
   * </pre>
   */
  public static final class FencedStoreBlockingStub
      extends io.grpc.stub.AbstractBlockingStub<FencedStoreBlockingStub> {
    private FencedStoreBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected FencedStoreBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new FencedStoreBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * CheckedWrite stores (or deletes) the value under (job, key). It is
     * accepted only when all of these hold at the moment of the write:
     * - `token` is the job's current token,
     * - the job's lease is live (held and not expired),
     * - `token` is &gt;= the highest token that has written this key.
     * A missing key is created. A stale token, or a lease that is no longer
     * live, fails with FAILED_PRECONDITION and reason FENCED, and the message
     * names the job's current token. A token the server never issued for the
     * job (zero, or above the current token) fails with INVALID_ARGUMENT.
     * Because the check is against the job's current token, a paused leader
     * that wakes up after its lease was granted to another holder is rejected
     * even before the new leader has written anything.
     * An accepted write is on stable storage before the reply.
     * </pre>
     */
    public dev.leasehold.v1.CheckedWriteResponse checkedWrite(dev.leasehold.v1.CheckedWriteRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCheckedWriteMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Read returns the value under (job, key). Reads are linearizable: a read
     * reflects every write acknowledged before it began.
     * </pre>
     */
    public dev.leasehold.v1.ReadResponse read(dev.leasehold.v1.ReadRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReadMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListKeys lists the keys of a job, ordered by key bytes.
     * </pre>
     */
    public dev.leasehold.v1.ListKeysResponse listKeys(dev.leasehold.v1.ListKeysRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListKeysMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do ListenableFuture-style rpc calls to service FencedStore.
   * <pre>
   * FencedStore keeps small values under (job, key), fenced by the job's
   * tokens: only the job's live leader can write.
   * </pre>
   */
  public static final class FencedStoreFutureStub
      extends io.grpc.stub.AbstractFutureStub<FencedStoreFutureStub> {
    private FencedStoreFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected FencedStoreFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new FencedStoreFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * CheckedWrite stores (or deletes) the value under (job, key). It is
     * accepted only when all of these hold at the moment of the write:
     * - `token` is the job's current token,
     * - the job's lease is live (held and not expired),
     * - `token` is &gt;= the highest token that has written this key.
     * A missing key is created. A stale token, or a lease that is no longer
     * live, fails with FAILED_PRECONDITION and reason FENCED, and the message
     * names the job's current token. A token the server never issued for the
     * job (zero, or above the current token) fails with INVALID_ARGUMENT.
     * Because the check is against the job's current token, a paused leader
     * that wakes up after its lease was granted to another holder is rejected
     * even before the new leader has written anything.
     * An accepted write is on stable storage before the reply.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.CheckedWriteResponse> checkedWrite(
        dev.leasehold.v1.CheckedWriteRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCheckedWriteMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Read returns the value under (job, key). Reads are linearizable: a read
     * reflects every write acknowledged before it began.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ReadResponse> read(
        dev.leasehold.v1.ReadRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReadMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ListKeys lists the keys of a job, ordered by key bytes.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ListKeysResponse> listKeys(
        dev.leasehold.v1.ListKeysRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListKeysMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_CHECKED_WRITE = 0;
  private static final int METHODID_READ = 1;
  private static final int METHODID_LIST_KEYS = 2;
  private static final int METHODID_WRITE_STREAM = 3;

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
        case METHODID_CHECKED_WRITE:
          serviceImpl.checkedWrite((dev.leasehold.v1.CheckedWriteRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.CheckedWriteResponse>) responseObserver);
          break;
        case METHODID_READ:
          serviceImpl.read((dev.leasehold.v1.ReadRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ReadResponse>) responseObserver);
          break;
        case METHODID_LIST_KEYS:
          serviceImpl.listKeys((dev.leasehold.v1.ListKeysRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ListKeysResponse>) responseObserver);
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
        case METHODID_WRITE_STREAM:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.writeStream(
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.WriteStreamResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  public static final io.grpc.ServerServiceDefinition bindService(AsyncService service) {
    return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
        .addMethod(
          getCheckedWriteMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.CheckedWriteRequest,
              dev.leasehold.v1.CheckedWriteResponse>(
                service, METHODID_CHECKED_WRITE)))
        .addMethod(
          getWriteStreamMethod(),
          io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
            new MethodHandlers<
              dev.leasehold.v1.WriteStreamRequest,
              dev.leasehold.v1.WriteStreamResponse>(
                service, METHODID_WRITE_STREAM)))
        .addMethod(
          getReadMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ReadRequest,
              dev.leasehold.v1.ReadResponse>(
                service, METHODID_READ)))
        .addMethod(
          getListKeysMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ListKeysRequest,
              dev.leasehold.v1.ListKeysResponse>(
                service, METHODID_LIST_KEYS)))
        .build();
  }

  private static abstract class FencedStoreBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    FencedStoreBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.leasehold.v1.Leasehold.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("FencedStore");
    }
  }

  private static final class FencedStoreFileDescriptorSupplier
      extends FencedStoreBaseDescriptorSupplier {
    FencedStoreFileDescriptorSupplier() {}
  }

  private static final class FencedStoreMethodDescriptorSupplier
      extends FencedStoreBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final java.lang.String methodName;

    FencedStoreMethodDescriptorSupplier(java.lang.String methodName) {
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
      synchronized (FencedStoreGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new FencedStoreFileDescriptorSupplier())
              .addMethod(getCheckedWriteMethod())
              .addMethod(getWriteStreamMethod())
              .addMethod(getReadMethod())
              .addMethod(getListKeysMethod())
              .build();
        }
      }
    }
    return result;
  }
}
