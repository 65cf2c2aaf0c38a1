package dev.leasehold.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * Leases grants, renews and releases per-job leases.
 * </pre>
 */
@io.grpc.stub.annotations.GrpcGenerated
public final class LeasesGrpc {

  private LeasesGrpc() {}

  public static final java.lang.String SERVICE_NAME = "leasehold.v1.Leases";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.AcquireRequest,
      dev.leasehold.v1.AcquireResponse> getAcquireMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Acquire",
      requestType = dev.leasehold.v1.AcquireRequest.class,
      responseType = dev.leasehold.v1.AcquireResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.AcquireRequest,
      dev.leasehold.v1.AcquireResponse> getAcquireMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.AcquireRequest, dev.leasehold.v1.AcquireResponse> getAcquireMethod;
    if ((getAcquireMethod = LeasesGrpc.getAcquireMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getAcquireMethod = LeasesGrpc.getAcquireMethod) == null) {
          LeasesGrpc.getAcquireMethod = getAcquireMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.AcquireRequest, dev.leasehold.v1.AcquireResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Acquire"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.AcquireRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.AcquireResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("Acquire"))
              .build();
        }
      }
    }
    return getAcquireMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.RenewRequest,
      dev.leasehold.v1.RenewResponse> getRenewMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Renew",
      requestType = dev.leasehold.v1.RenewRequest.class,
      responseType = dev.leasehold.v1.RenewResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.RenewRequest,
      dev.leasehold.v1.RenewResponse> getRenewMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.RenewRequest, dev.leasehold.v1.RenewResponse> getRenewMethod;
    if ((getRenewMethod = LeasesGrpc.getRenewMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getRenewMethod = LeasesGrpc.getRenewMethod) == null) {
          LeasesGrpc.getRenewMethod = getRenewMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.RenewRequest, dev.leasehold.v1.RenewResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Renew"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.RenewRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.RenewResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("Renew"))
              .build();
        }
      }
    }
    return getRenewMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ReleaseRequest,
      dev.leasehold.v1.ReleaseResponse> getReleaseMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Release",
      requestType = dev.leasehold.v1.ReleaseRequest.class,
      responseType = dev.leasehold.v1.ReleaseResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ReleaseRequest,
      dev.leasehold.v1.ReleaseResponse> getReleaseMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ReleaseRequest, dev.leasehold.v1.ReleaseResponse> getReleaseMethod;
    if ((getReleaseMethod = LeasesGrpc.getReleaseMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getReleaseMethod = LeasesGrpc.getReleaseMethod) == null) {
          LeasesGrpc.getReleaseMethod = getReleaseMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ReleaseRequest, dev.leasehold.v1.ReleaseResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Release"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ReleaseRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ReleaseResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("Release"))
              .build();
        }
      }
    }
    return getReleaseMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.TransferLeaseRequest,
      dev.leasehold.v1.TransferLeaseResponse> getTransferLeaseMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "TransferLease",
      requestType = dev.leasehold.v1.TransferLeaseRequest.class,
      responseType = dev.leasehold.v1.TransferLeaseResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.TransferLeaseRequest,
      dev.leasehold.v1.TransferLeaseResponse> getTransferLeaseMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.TransferLeaseRequest, dev.leasehold.v1.TransferLeaseResponse> getTransferLeaseMethod;
    if ((getTransferLeaseMethod = LeasesGrpc.getTransferLeaseMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getTransferLeaseMethod = LeasesGrpc.getTransferLeaseMethod) == null) {
          LeasesGrpc.getTransferLeaseMethod = getTransferLeaseMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.TransferLeaseRequest, dev.leasehold.v1.TransferLeaseResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "TransferLease"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.TransferLeaseRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.TransferLeaseResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("TransferLease"))
              .build();
        }
      }
    }
    return getTransferLeaseMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.GetLeaseRequest,
      dev.leasehold.v1.Lease> getGetLeaseMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetLease",
      requestType = dev.leasehold.v1.GetLeaseRequest.class,
      responseType = dev.leasehold.v1.Lease.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.GetLeaseRequest,
      dev.leasehold.v1.Lease> getGetLeaseMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.GetLeaseRequest, dev.leasehold.v1.Lease> getGetLeaseMethod;
    if ((getGetLeaseMethod = LeasesGrpc.getGetLeaseMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getGetLeaseMethod = LeasesGrpc.getGetLeaseMethod) == null) {
          LeasesGrpc.getGetLeaseMethod = getGetLeaseMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.GetLeaseRequest, dev.leasehold.v1.Lease>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetLease"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.GetLeaseRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.Lease.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("GetLease"))
              .build();
        }
      }
    }
    return getGetLeaseMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.DeleteJobRequest,
      dev.leasehold.v1.DeleteJobResponse> getDeleteJobMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "DeleteJob",
      requestType = dev.leasehold.v1.DeleteJobRequest.class,
      responseType = dev.leasehold.v1.DeleteJobResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.DeleteJobRequest,
      dev.leasehold.v1.DeleteJobResponse> getDeleteJobMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.DeleteJobRequest, dev.leasehold.v1.DeleteJobResponse> getDeleteJobMethod;
    if ((getDeleteJobMethod = LeasesGrpc.getDeleteJobMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getDeleteJobMethod = LeasesGrpc.getDeleteJobMethod) == null) {
          LeasesGrpc.getDeleteJobMethod = getDeleteJobMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.DeleteJobRequest, dev.leasehold.v1.DeleteJobResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "DeleteJob"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.DeleteJobRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.DeleteJobResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("DeleteJob"))
              .build();
        }
      }
    }
    return getDeleteJobMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ListLeasesRequest,
      dev.leasehold.v1.ListLeasesResponse> getListLeasesMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListLeases",
      requestType = dev.leasehold.v1.ListLeasesRequest.class,
      responseType = dev.leasehold.v1.ListLeasesResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ListLeasesRequest,
      dev.leasehold.v1.ListLeasesResponse> getListLeasesMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ListLeasesRequest, dev.leasehold.v1.ListLeasesResponse> getListLeasesMethod;
    if ((getListLeasesMethod = LeasesGrpc.getListLeasesMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getListLeasesMethod = LeasesGrpc.getListLeasesMethod) == null) {
          LeasesGrpc.getListLeasesMethod = getListLeasesMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ListLeasesRequest, dev.leasehold.v1.ListLeasesResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListLeases"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ListLeasesRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ListLeasesResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("ListLeases"))
              .build();
        }
      }
    }
    return getListLeasesMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.GetHistoryRequest,
      dev.leasehold.v1.GetHistoryResponse> getGetHistoryMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetHistory",
      requestType = dev.leasehold.v1.GetHistoryRequest.class,
      responseType = dev.leasehold.v1.GetHistoryResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.GetHistoryRequest,
      dev.leasehold.v1.GetHistoryResponse> getGetHistoryMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.GetHistoryRequest, dev.leasehold.v1.GetHistoryResponse> getGetHistoryMethod;
    if ((getGetHistoryMethod = LeasesGrpc.getGetHistoryMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getGetHistoryMethod = LeasesGrpc.getGetHistoryMethod) == null) {
          LeasesGrpc.getGetHistoryMethod = getGetHistoryMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.GetHistoryRequest, dev.leasehold.v1.GetHistoryResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetHistory"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.GetHistoryRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.GetHistoryResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("GetHistory"))
              .build();
        }
      }
    }
    return getGetHistoryMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.WatchLeaseRequest,
      dev.leasehold.v1.LeaseEvent> getWatchLeaseMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "WatchLease",
      requestType = dev.leasehold.v1.WatchLeaseRequest.class,
      responseType = dev.leasehold.v1.LeaseEvent.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.WatchLeaseRequest,
      dev.leasehold.v1.LeaseEvent> getWatchLeaseMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.WatchLeaseRequest, dev.leasehold.v1.LeaseEvent> getWatchLeaseMethod;
    if ((getWatchLeaseMethod = LeasesGrpc.getWatchLeaseMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getWatchLeaseMethod = LeasesGrpc.getWatchLeaseMethod) == null) {
          LeasesGrpc.getWatchLeaseMethod = getWatchLeaseMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.WatchLeaseRequest, dev.leasehold.v1.LeaseEvent>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "WatchLease"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.WatchLeaseRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.LeaseEvent.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("WatchLease"))
              .build();
        }
      }
    }
    return getWatchLeaseMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.KeepAliveRequest,
      dev.leasehold.v1.KeepAliveResponse> getKeepAliveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "KeepAlive",
      requestType = dev.leasehold.v1.KeepAliveRequest.class,
      responseType = dev.leasehold.v1.KeepAliveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.KeepAliveRequest,
      dev.leasehold.v1.KeepAliveResponse> getKeepAliveMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.KeepAliveRequest, dev.leasehold.v1.KeepAliveResponse> getKeepAliveMethod;
    if ((getKeepAliveMethod = LeasesGrpc.getKeepAliveMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getKeepAliveMethod = LeasesGrpc.getKeepAliveMethod) == null) {
          LeasesGrpc.getKeepAliveMethod = getKeepAliveMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.KeepAliveRequest, dev.leasehold.v1.KeepAliveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "KeepAlive"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.KeepAliveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.KeepAliveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("KeepAlive"))
              .build();
        }
      }
    }
    return getKeepAliveMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.GetSigningKeysRequest,
      dev.leasehold.v1.GetSigningKeysResponse> getGetSigningKeysMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetSigningKeys",
      requestType = dev.leasehold.v1.GetSigningKeysRequest.class,
      responseType = dev.leasehold.v1.GetSigningKeysResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.GetSigningKeysRequest,
      dev.leasehold.v1.GetSigningKeysResponse> getGetSigningKeysMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.GetSigningKeysRequest, dev.leasehold.v1.GetSigningKeysResponse> getGetSigningKeysMethod;
    if ((getGetSigningKeysMethod = LeasesGrpc.getGetSigningKeysMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getGetSigningKeysMethod = LeasesGrpc.getGetSigningKeysMethod) == null) {
          LeasesGrpc.getGetSigningKeysMethod = getGetSigningKeysMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.GetSigningKeysRequest, dev.leasehold.v1.GetSigningKeysResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetSigningKeys"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.GetSigningKeysRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.GetSigningKeysResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("GetSigningKeys"))
              .build();
        }
      }
    }
    return getGetSigningKeysMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.leasehold.v1.ListWaitersRequest,
      dev.leasehold.v1.ListWaitersResponse> getListWaitersMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListWaiters",
      requestType = dev.leasehold.v1.ListWaitersRequest.class,
      responseType = dev.leasehold.v1.ListWaitersResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.leasehold.v1.ListWaitersRequest,
      dev.leasehold.v1.ListWaitersResponse> getListWaitersMethod() {
    io.grpc.MethodDescriptor<dev.leasehold.v1.ListWaitersRequest, dev.leasehold.v1.ListWaitersResponse> getListWaitersMethod;
    if ((getListWaitersMethod = LeasesGrpc.getListWaitersMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getListWaitersMethod = LeasesGrpc.getListWaitersMethod) == null) {
          LeasesGrpc.getListWaitersMethod = getListWaitersMethod =
              io.grpc.MethodDescriptor.<dev.leasehold.v1.ListWaitersRequest, dev.leasehold.v1.ListWaitersResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListWaiters"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ListWaitersRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.leasehold.v1.ListWaitersResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("ListWaiters"))
              .build();
        }
      }
    }
    return getListWaitersMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static LeasesStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LeasesStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LeasesStub>() {
        @java.lang.Override
        public LeasesStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LeasesStub(channel, callOptions);
        }
      };
    return LeasesStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports all types of calls on the service
   */
  public static LeasesBlockingV2Stub newBlockingV2Stub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LeasesBlockingV2Stub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LeasesBlockingV2Stub>() {
        @java.lang.Override
        public LeasesBlockingV2Stub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LeasesBlockingV2Stub(channel, callOptions);
        }
      };
    return LeasesBlockingV2Stub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static LeasesBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LeasesBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LeasesBlockingStub>() {
        @java.lang.Override
        public LeasesBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LeasesBlockingStub(channel, callOptions);
        }
      };
    return LeasesBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static LeasesFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LeasesFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LeasesFutureStub>() {
        @java.lang.Override
        public LeasesFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LeasesFutureStub(channel, callOptions);
        }
      };
    return LeasesFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * Leases grants, renews and releases per-job leases.
   * </pre>
   */
  public interface AsyncService {

    /**
     * <pre>
     * Acquire grants the lease on `job` to `holder` when it is free, expired,
     * or already held by `holder`. A grant to a new holder, or after expiry or
     * release, carries the job's previous token plus one; a grant to the
     * current live holder keeps its token and extends the lease like Renew.
     * When another holder has a live lease, Acquire answers `acquired = false`
     * with the current lease, at once if `wait` is zero. When `wait` &gt; 0 it
     * blocks up to `wait` and grants as soon as the lease frees up (release or
     * expiry). Waiters on one job are served first come, first served; while
     * any waiter is queued, an Acquire that does not wait is not granted ahead
     * of it. A waiting Acquire is woken by the release or by the expiry
     * deadline itself; it never polls.
     * A grant is on stable storage before the reply.
     * With `bind_to_stream`, the grant is bound to the caller's connection
     * (see AcquireRequest.bind_to_stream): it is released at once when the
     * client's end of that connection closes or resets, as when its process
     * dies.
     * </pre>
     */
    default void acquire(dev.leasehold.v1.AcquireRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.AcquireResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAcquireMethod(), responseObserver);
    }

    /**
     * <pre>
     * Renew extends a live lease held by `holder` with `token` by `ttl`,
     * counted from now. Anything else (the lease expired, another holder,
     * another token, the lease was released) fails with FAILED_PRECONDITION and
     * reason LEASE_LOST. A renewal never changes the token.
     * </pre>
     */
    default void renew(dev.leasehold.v1.RenewRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.RenewResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRenewMethod(), responseObserver);
    }

    /**
     * <pre>
     * Release steps down voluntarily. The lease is free at once, the first
     * waiting Acquire is granted, and the next grant carries a higher token.
     * Releasing a lease that is no longer held by `holder` with `token` fails
     * with FAILED_PRECONDITION, reason LEASE_LOST, and changes nothing.
     * </pre>
     */
    default void release(dev.leasehold.v1.ReleaseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ReleaseResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReleaseMethod(), responseObserver);
    }

    /**
     * <pre>
     * TransferLease hands the live lease of `holder` with `token` to a
     * waiting Acquire, in one durable decision: the successor is granted
     * the next token (`token` + 1) with no moment when the job is free, and
     * its waiting Acquire returns at once. The successor is the first
     * waiter in line whose holder is `to_holder`, or the first waiter in
     * line when `to_holder` is empty.
     * - No such waiter: FAILED_PRECONDITION, reason NO_SUCCESSOR, and
     *   nothing changes (the caller still leads).
     * - The lease is not `holder`'s with `token` (expired, released, moved
     *   on, or handed over by a concurrent transfer): FAILED_PRECONDITION,
     *   reason LEASE_LOST, as Renew would answer, and nothing changes.
     * The history records the tenure's end as TRANSFERRED, and watchers see
     * the successor's grant (ACQUIRED). With a policy, this is action
     * `lease`, and the lease must be the caller's principal's.
     * </pre>
     */
    default void transferLease(dev.leasehold.v1.TransferLeaseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.TransferLeaseResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getTransferLeaseMethod(), responseObserver);
    }

    /**
     * <pre>
     * GetLease returns the job's lease. A job never granted has token 0; a job
     * that is free keeps its last token and has an empty holder.
     * </pre>
     */
    default void getLease(dev.leasehold.v1.GetLeaseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.Lease> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetLeaseMethod(), responseObserver);
    }

    /**
     * <pre>
     * DeleteJob removes a job, every key of its fenced store and its history
     * of leaders, to give their room back. Refused with FAILED_PRECONDITION, reason JOB_IN_USE, while the
     * job's lease is live or an Acquire waits for it; nothing changes then.
     * A job that does not exist is not an error (`deleted` is false).
     * Tokens never go back: a job created again under the same name gets
     * tokens above every token the deleted job issued (the server keeps a
     * store-wide floor, raised by each deletion). Until then GetLease shows the
     * job as never granted (token 0). With a policy, this is action `admin`.
     * </pre>
     */
    default void deleteJob(dev.leasehold.v1.DeleteJobRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.DeleteJobResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDeleteJobMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListLeases lists every job the server knows, ordered by job name. With a
     * policy, only the jobs the caller may read: it needs a `read` grant
     * somewhere (PERMISSION_DENIED otherwise), and a page, its
     * `next_page_token` and an empty page say nothing of the other jobs.
     * </pre>
     */
    default void listLeases(dev.leasehold.v1.ListLeasesRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ListLeasesResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListLeasesMethod(), responseObserver);
    }

    /**
     * <pre>
     * GetHistory returns the job's history of leaders, newest first: one
     * Tenure per token granted (a token's time as leader), with how it
     * ended. The server keeps the tenures of each job's newest tokens
     * (`leasehold serve --history-per-job`, default 100), stored with the
     * same durability as the grants themselves: a tenure a client was told
     * of is in the history, whatever crashes. DeleteJob removes the job's
     * history with it, so that jobs created and deleted without end leave
     * nothing behind (read it first if it matters). A job with no history
     * has an empty one (not an error). With a policy, this is
     * action `read`.
     * Its times are on the server's wall clock, for people (a post-mortem
     * asking which token led when a write was made). No rule reads them:
     * lease timing is on the monotonic clock, and a wall-clock jump moves
     * these times, never a lease.
     * </pre>
     */
    default void getHistory(dev.leasehold.v1.GetHistoryRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.GetHistoryResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetHistoryMethod(), responseObserver);
    }

    /**
     * <pre>
     * WatchLease sends the job's current lease first (kind CURRENT), then an
     * event for every change of holder or token as it happens: ACQUIRED,
     * RELEASED or EXPIRED, and VALUE_CHANGED when the holder changes the
     * lease's value. Renewals that change no value send nothing. A watcher that falls behind
     * is not buffered without bound: it receives the latest state, and changes
     * it did not read in time are folded into that one event.
     * </pre>
     */
    default void watchLease(dev.leasehold.v1.WatchLeaseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.LeaseEvent> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getWatchLeaseMethod(), responseObserver);
    }

    /**
     * <pre>
     * KeepAlive renews many leases over one long-lived bidirectional stream,
     * in the spirit of etcd's LeaseKeepAlive: a worker that holds several
     * leases sends one KeepAliveRequest carrying a renewal for each of them,
     * every ttl/3 or so, and gets back one KeepAliveResponse with a result
     * per renewal, in the same order.
     * Each renewal follows exactly the rules of Renew (same token, same
     * holder, lease live; a renewal never changes the token), and each is
     * decided on its own: a lost lease or a bad entry does not stop the
     * others in the same message. Requests on one stream are answered in the
     * order they were sent, one response per request; a client may send the
     * next request before the previous response arrives. A response is sent
     * only once every change it reports is on stable storage (a renewal only
     * needs a sync when it raises the TTL above the stored one).
     * The stream itself ends with a status only for what concerns all of it:
     * INVALID_ARGUMENT (field "renewals") when one message carries more than
     * 1000 renewals or is larger than the server's maximum message size
     * (about 66 KiB by default, several hundred renewals with typical names:
     * split larger batches across messages), INVALID_ARGUMENT naming the
     * field when a message does not decode (e.g. "renewals.holder" is not
     * UTF-8), UNAVAILABLE with reason SHUTTING_DOWN when the server stops,
     * UNAVAILABLE with reason STORAGE when a needed sync failed. When a
     * message is refused, every message sent before it is answered first,
     * and nothing in it or after it is done. Closing the sending side ends
     * the stream, with OK, once every response has been sent.
     * </pre>
     */
    default io.grpc.stub.StreamObserver<dev.leasehold.v1.KeepAliveRequest> keepAlive(
        io.grpc.stub.StreamObserver<dev.leasehold.v1.KeepAliveResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getKeepAliveMethod(), responseObserver);
    }

    /**
     * <pre>
     * The public keys that verify grants' proofs (`Lease.proof`), as a JWKS
     * (RFC 7517) and as a list. The first signs new grants; every one listed
     * verifies. Also served at GET /keys on the admin port. Needs no grant.
     * </pre>
     */
    default void getSigningKeys(dev.leasehold.v1.GetSigningKeysRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.GetSigningKeysResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetSigningKeysMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListWaiters returns the Acquires waiting for the job, in line order
     * (the preferred candidates first, then the others, each class first
     * come, first served): the order in which a release would hand the
     * lease over. A job nobody waits for, or that does not exist, has an
     * empty line (not an error). With a policy, this is action `read`. For
     * a counted job (AcquireRequest.slots), the first listed is the Acquire
     * that holds the line's turn (listed as not preferred), then those
     * waiting for the turn.
     * </pre>
     */
    default void listWaiters(dev.leasehold.v1.ListWaitersRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ListWaitersResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListWaitersMethod(), responseObserver);
    }
  }

  /**
   * Base class for the server implementation of the service Leases.
   * <pre>
   * Leases grants, renews and releases per-job leases.
   * </pre>
   */
  public static abstract class LeasesImplBase
      implements io.grpc.BindableService, AsyncService {

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return LeasesGrpc.bindService(this);
    }
  }

  /**
   * A stub to allow clients to do asynchronous rpc calls to service Leases.
   * <pre>
   * Leases grants, renews and releases per-job leases.
   * </pre>
   */
  public static final class LeasesStub
      extends io.grpc.stub.AbstractAsyncStub<LeasesStub> {
    private LeasesStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LeasesStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LeasesStub(channel, callOptions);
    }

    /**
     * <pre>
     * Acquire grants the lease on `job` to `holder` when it is free, expired,
     * or already held by `holder`. A grant to a new holder, or after expiry or
     * release, carries the job's previous token plus one; a grant to the
     * current live holder keeps its token and extends the lease like Renew.
     * When another holder has a live lease, Acquire answers `acquired = false`
     * with the current lease, at once if `wait` is zero. When `wait` &gt; 0 it
     * blocks up to `wait` and grants as soon as the lease frees up (release or
     * expiry). Waiters on one job are served first come, first served; while
     * any waiter is queued, an Acquire that does not wait is not granted ahead
     * of it. A waiting Acquire is woken by the release or by the expiry
     * deadline itself; it never polls.
     * A grant is on stable storage before the reply.
     * With `bind_to_stream`, the grant is bound to the caller's connection
     * (see AcquireRequest.bind_to_stream): it is released at once when the
     * client's end of that connection closes or resets, as when its process
     * dies.
     * </pre>
     */
    public void acquire(dev.leasehold.v1.AcquireRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.AcquireResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAcquireMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Renew extends a live lease held by `holder` with `token` by `ttl`,
     * counted from now. Anything else (the lease expired, another holder,
     * another token, the lease was released) fails with FAILED_PRECONDITION and
     * reason LEASE_LOST. A renewal never changes the token.
     * </pre>
     */
    public void renew(dev.leasehold.v1.RenewRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.RenewResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getRenewMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Release steps down voluntarily. The lease is free at once, the first
     * waiting Acquire is granted, and the next grant carries a higher token.
     * Releasing a lease that is no longer held by `holder` with `token` fails
     * with FAILED_PRECONDITION, reason LEASE_LOST, and changes nothing.
     * </pre>
     */
    public void release(dev.leasehold.v1.ReleaseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ReleaseResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReleaseMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * TransferLease hands the live lease of `holder` with `token` to a
     * waiting Acquire, in one durable decision: the successor is granted
     * the next token (`token` + 1) with no moment when the job is free, and
     * its waiting Acquire returns at once. The successor is the first
     * waiter in line whose holder is `to_holder`, or the first waiter in
     * line when `to_holder` is empty.
     * - No such waiter: FAILED_PRECONDITION, reason NO_SUCCESSOR, and
     *   nothing changes (the caller still leads).
     * - The lease is not `holder`'s with `token` (expired, released, moved
     *   on, or handed over by a concurrent transfer): FAILED_PRECONDITION,
     *   reason LEASE_LOST, as Renew would answer, and nothing changes.
     * The history records the tenure's end as TRANSFERRED, and watchers see
     * the successor's grant (ACQUIRED). With a policy, this is action
     * `lease`, and the lease must be the caller's principal's.
     * </pre>
     */
    public void transferLease(dev.leasehold.v1.TransferLeaseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.TransferLeaseResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getTransferLeaseMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * GetLease returns the job's lease. A job never granted has token 0; a job
     * that is free keeps its last token and has an empty holder.
     * </pre>
     */
    public void getLease(dev.leasehold.v1.GetLeaseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.Lease> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetLeaseMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * DeleteJob removes a job, every key of its fenced store and its history
     * of leaders, to give their room back. Refused with FAILED_PRECONDITION, reason JOB_IN_USE, while the
     * job's lease is live or an Acquire waits for it; nothing changes then.
     * A job that does not exist is not an error (`deleted` is false).
     * Tokens never go back: a job created again under the same name gets
     * tokens above every token the deleted job issued (the server keeps a
     * store-wide floor, raised by each deletion). Until then GetLease shows the
     * job as never granted (token 0). With a policy, this is action `admin`.
     * </pre>
     */
    public void deleteJob(dev.leasehold.v1.DeleteJobRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.DeleteJobResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDeleteJobMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListLeases lists every job the server knows, ordered by job name. With a
     * policy, only the jobs the caller may read: it needs a `read` grant
     * somewhere (PERMISSION_DENIED otherwise), and a page, its
     * `next_page_token` and an empty page say nothing of the other jobs.
     * </pre>
     */
    public void listLeases(dev.leasehold.v1.ListLeasesRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ListLeasesResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListLeasesMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * GetHistory returns the job's history of leaders, newest first: one
     * Tenure per token granted (a token's time as leader), with how it
     * ended. The server keeps the tenures of each job's newest tokens
     * (`leasehold serve --history-per-job`, default 100), stored with the
     * same durability as the grants themselves: a tenure a client was told
     * of is in the history, whatever crashes. DeleteJob removes the job's
     * history with it, so that jobs created and deleted without end leave
     * nothing behind (read it first if it matters). A job with no history
     * has an empty one (not an error). With a policy, this is
     * action `read`.
     * Its times are on the server's wall clock, for people (a post-mortem
     * asking which token led when a write was made). No rule reads them:
     * lease timing is on the monotonic clock, and a wall-clock jump moves
     * these times, never a lease.
     * </pre>
     */
    public void getHistory(dev.leasehold.v1.GetHistoryRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.GetHistoryResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetHistoryMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * WatchLease sends the job's current lease first (kind CURRENT), then an
     * event for every change of holder or token as it happens: ACQUIRED,
     * RELEASED or EXPIRED, and VALUE_CHANGED when the holder changes the
     * lease's value. Renewals that change no value send nothing. A watcher that falls behind
     * is not buffered without bound: it receives the latest state, and changes
     * it did not read in time are folded into that one event.
     * </pre>
     */
    public void watchLease(dev.leasehold.v1.WatchLeaseRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.LeaseEvent> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getWatchLeaseMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * KeepAlive renews many leases over one long-lived bidirectional stream,
     * in the spirit of etcd's LeaseKeepAlive: a worker that holds several
     * leases sends one KeepAliveRequest carrying a renewal for each of them,
     * every ttl/3 or so, and gets back one KeepAliveResponse with a result
     * per renewal, in the same order.
     * Each renewal follows exactly the rules of Renew (same token, same
     * holder, lease live; a renewal never changes the token), and each is
     * decided on its own: a lost lease or a bad entry does not stop the
     * others in the same message. Requests on one stream are answered in the
     * order they were sent, one response per request; a client may send the
     * next request before the previous response arrives. A response is sent
     * only once every change it reports is on stable storage (a renewal only
     * needs a sync when it raises the TTL above the stored one).
     * The stream itself ends with a status only for what concerns all of it:
     * INVALID_ARGUMENT (field "renewals") when one message carries more than
     * 1000 renewals or is larger than the server's maximum message size
     * (about 66 KiB by default, several hundred renewals with typical names:
     * split larger batches across messages), INVALID_ARGUMENT naming the
     * field when a message does not decode (e.g. "renewals.holder" is not
     * UTF-8), UNAVAILABLE with reason SHUTTING_DOWN when the server stops,
     * UNAVAILABLE with reason STORAGE when a needed sync failed. When a
     * message is refused, every message sent before it is answered first,
     * and nothing in it or after it is done. Closing the sending side ends
     * the stream, with OK, once every response has been sent.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<dev.leasehold.v1.KeepAliveRequest> keepAlive(
        io.grpc.stub.StreamObserver<dev.leasehold.v1.KeepAliveResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getKeepAliveMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * The public keys that verify grants' proofs (`Lease.proof`), as a JWKS
     * (RFC 7517) and as a list. The first signs new grants; every one listed
     * verifies. Also served at GET /keys on the admin port. Needs no grant.
     * </pre>
     */
    public void getSigningKeys(dev.leasehold.v1.GetSigningKeysRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.GetSigningKeysResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetSigningKeysMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListWaiters returns the Acquires waiting for the job, in line order
     * (the preferred candidates first, then the others, each class first
     * come, first served): the order in which a release would hand the
     * lease over. A job nobody waits for, or that does not exist, has an
     * empty line (not an error). With a policy, this is action `read`. For
     * a counted job (AcquireRequest.slots), the first listed is the Acquire
     * that holds the line's turn (listed as not preferred), then those
     * waiting for the turn.
     * </pre>
     */
    public void listWaiters(dev.leasehold.v1.ListWaitersRequest request,
        io.grpc.stub.StreamObserver<dev.leasehold.v1.ListWaitersResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListWaitersMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * A stub to allow clients to do synchronous rpc calls to service Leases.
   * <pre>
   * Leases grants, renews and releases per-job leases.
   * </pre>
   */
  public static final class LeasesBlockingV2Stub
      extends io.grpc.stub.AbstractBlockingStub<LeasesBlockingV2Stub> {
    private LeasesBlockingV2Stub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LeasesBlockingV2Stub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LeasesBlockingV2Stub(channel, callOptions);
    }

    /**
     * <pre>
     * Acquire grants the lease on `job` to `holder` when it is free, expired,
     * or already held by `holder`. A grant to a new holder, or after expiry or
     * release, carries the job's previous token plus one; a grant to the
     * current live holder keeps its token and extends the lease like Renew.
     * When another holder has a live lease, Acquire answers `acquired = false`
     * with the current lease, at once if `wait` is zero. When `wait` &gt; 0 it
     * blocks up to `wait` and grants as soon as the lease frees up (release or
     * expiry). Waiters on one job are served first come, first served; while
     * any waiter is queued, an Acquire that does not wait is not granted ahead
     * of it. A waiting Acquire is woken by the release or by the expiry
     * deadline itself; it never polls.
     * A grant is on stable storage before the reply.
     * With `bind_to_stream`, the grant is bound to the caller's connection
     * (see AcquireRequest.bind_to_stream): it is released at once when the
     * client's end of that connection closes or resets, as when its process
     * dies.
     * </pre>
     */
    public dev.leasehold.v1.AcquireResponse acquire(dev.leasehold.v1.AcquireRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getAcquireMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Renew extends a live lease held by `holder` with `token` by `ttl`,
     * counted from now. Anything else (the lease expired, another holder,
     * another token, the lease was released) fails with FAILED_PRECONDITION and
     * reason LEASE_LOST. A renewal never changes the token.
     * </pre>
     */
    public dev.leasehold.v1.RenewResponse renew(dev.leasehold.v1.RenewRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getRenewMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Release steps down voluntarily. The lease is free at once, the first
     * waiting Acquire is granted, and the next grant carries a higher token.
     * Releasing a lease that is no longer held by `holder` with `token` fails
     * with FAILED_PRECONDITION, reason LEASE_LOST, and changes nothing.
     * </pre>
     */
    public dev.leasehold.v1.ReleaseResponse release(dev.leasehold.v1.ReleaseRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getReleaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * TransferLease hands the live lease of `holder` with `token` to a
     * waiting Acquire, in one durable decision: the successor is granted
     * the next token (`token` + 1) with no moment when the job is free, and
     * its waiting Acquire returns at once. The successor is the first
     * waiter in line whose holder is `to_holder`, or the first waiter in
     * line when `to_holder` is empty.
     * - No such waiter: FAILED_PRECONDITION, reason NO_SUCCESSOR, and
     *   nothing changes (the caller still leads).
     * - The lease is not `holder`'s with `token` (expired, released, moved
     *   on, or handed over by a concurrent transfer): FAILED_PRECONDITION,
     *   reason LEASE_LOST, as Renew would answer, and nothing changes.
     * The history records the tenure's end as TRANSFERRED, and watchers see
     * the successor's grant (ACQUIRED). With a policy, this is action
     * `lease`, and the lease must be the caller's principal's.
     * </pre>
     */
    public dev.leasehold.v1.TransferLeaseResponse transferLease(dev.leasehold.v1.TransferLeaseRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getTransferLeaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * GetLease returns the job's lease. A job never granted has token 0; a job
     * that is free keeps its last token and has an empty holder.
     * </pre>
     */
    public dev.leasehold.v1.Lease getLease(dev.leasehold.v1.GetLeaseRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getGetLeaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * DeleteJob removes a job, every key of its fenced store and its history
     * of leaders, to give their room back. Refused with FAILED_PRECONDITION, reason JOB_IN_USE, while the
     * job's lease is live or an Acquire waits for it; nothing changes then.
     * A job that does not exist is not an error (`deleted` is false).
     * Tokens never go back: a job created again under the same name gets
     * tokens above every token the deleted job issued (the server keeps a
     * store-wide floor, raised by each deletion). Until then GetLease shows the
     * job as never granted (token 0). With a policy, this is action `admin`.
     * </pre>
     */
    public dev.leasehold.v1.DeleteJobResponse deleteJob(dev.leasehold.v1.DeleteJobRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getDeleteJobMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListLeases lists every job the server knows, ordered by job name. With a
     * policy, only the jobs the caller may read: it needs a `read` grant
     * somewhere (PERMISSION_DENIED otherwise), and a page, its
     * `next_page_token` and an empty page say nothing of the other jobs.
     * </pre>
     */
    public dev.leasehold.v1.ListLeasesResponse listLeases(dev.leasehold.v1.ListLeasesRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getListLeasesMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * GetHistory returns the job's history of leaders, newest first: one
     * Tenure per token granted (a token's time as leader), with how it
     * ended. The server keeps the tenures of each job's newest tokens
     * (`leasehold serve --history-per-job`, default 100), stored with the
     * same durability as the grants themselves: a tenure a client was told
     * of is in the history, whatever crashes. DeleteJob removes the job's
     * history with it, so that jobs created and deleted without end leave
     * nothing behind (read it first if it matters). A job with no history
     * has an empty one (not an error). With a policy, this is
     * action `read`.
     * Its times are on the server's wall clock, for people (a post-mortem
     * asking which token led when a write was made). No rule reads them:
     * lease timing is on the monotonic clock, and a wall-clock jump moves
     * these times, never a lease.
     * </pre>
     */
    public dev.leasehold.v1.GetHistoryResponse getHistory(dev.leasehold.v1.GetHistoryRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getGetHistoryMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * WatchLease sends the job's current lease first (kind CURRENT), then an
     * event for every change of holder or token as it happens: ACQUIRED,
     * RELEASED or EXPIRED, and VALUE_CHANGED when the holder changes the
     * lease's value. Renewals that change no value send nothing. A watcher that falls behind
     * is not buffered without bound: it receives the latest state, and changes
     * it did not read in time are folded into that one event.
     * </pre>
     */
    @io.grpc.ExperimentalApi("https://github.com/grpc/grpc-java/issues/10918")
    public io.grpc.stub.BlockingClientCall<?, dev.leasehold.v1.LeaseEvent>
        watchLease(dev.leasehold.v1.WatchLeaseRequest request) {
      return io.grpc.stub.ClientCalls.blockingV2ServerStreamingCall(
          getChannel(), getWatchLeaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * KeepAlive renews many leases over one long-lived bidirectional stream,
     * in the spirit of etcd's LeaseKeepAlive: a worker that holds several
     * leases sends one KeepAliveRequest carrying a renewal for each of them,
     * every ttl/3 or so, and gets back one KeepAliveResponse with a result
     * per renewal, in the same order.
     * Each renewal follows exactly the rules of Renew (same token, same
     * holder, lease live; a renewal never changes the token), and each is
     * decided on its own: a lost lease or a bad entry does not stop the
     * others in the same message. Requests on one stream are answered in the
     * order they were sent, one response per request; a client may send the
     * next request before the previous response arrives. A response is sent
     * only once every change it reports is on stable storage (a renewal only
     * needs a sync when it raises the TTL above the stored one).
     * The stream itself ends with a status only for what concerns all of it:
     * INVALID_ARGUMENT (field "renewals") when one message carries more than
     * 1000 renewals or is larger than the server's maximum message size
     * (about 66 KiB by default, several hundred renewals with typical names:
     * split larger batches across messages), INVALID_ARGUMENT naming the
     * field when a message does not decode (e.g. "renewals.holder" is not
     * UTF-8), UNAVAILABLE with reason SHUTTING_DOWN when the server stops,
     * UNAVAILABLE with reason STORAGE when a needed sync failed. When a
     * message is refused, every message sent before it is answered first,
     * and nothing in it or after it is done. Closing the sending side ends
     * the stream, with OK, once every response has been sent.
     * </pre>
     */
    @io.grpc.ExperimentalApi("https://github.com/grpc/grpc-java/issues/10918")
    public io.grpc.stub.BlockingClientCall<dev.leasehold.v1.KeepAliveRequest, dev.leasehold.v1.KeepAliveResponse>
        keepAlive() {
      return io.grpc.stub.ClientCalls.blockingBidiStreamingCall(
          getChannel(), getKeepAliveMethod(), getCallOptions());
    }

    /**
     * <pre>
     * The public keys that verify grants' proofs (`Lease.proof`), as a JWKS
     * (RFC 7517) and as a list. The first signs new grants; every one listed
     * verifies. Also served at GET /keys on the admin port. Needs no grant.
     * </pre>
     */
    public dev.leasehold.v1.GetSigningKeysResponse getSigningKeys(dev.leasehold.v1.GetSigningKeysRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getGetSigningKeysMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListWaiters returns the Acquires waiting for the job, in line order
     * (the preferred candidates first, then the others, each class first
     * come, first served): the order in which a release would hand the
     * lease over. A job nobody waits for, or that does not exist, has an
     * empty line (not an error). With a policy, this is action `read`. For
     * a counted job (AcquireRequest.slots), the first listed is the Acquire
     * that holds the line's turn (listed as not preferred), then those
     * waiting for the turn.
     * </pre>
     */
    public dev.leasehold.v1.ListWaitersResponse listWaiters(dev.leasehold.v1.ListWaitersRequest request) throws io.grpc.StatusException {
      return io.grpc.stub.ClientCalls.blockingV2UnaryCall(
          getChannel(), getListWaitersMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do limited synchronous rpc calls to service Leases.
   * <pre>
   * Leases grants, renews and releases per-job leases.
   * </pre>
   */
  public static final class LeasesBlockingStub
      extends io.grpc.stub.AbstractBlockingStub<LeasesBlockingStub> {
    private LeasesBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LeasesBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LeasesBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Acquire grants the lease on `job` to `holder` when it is free, expired,
     * or already held by `holder`. A grant to a new holder, or after expiry or
     * release, carries the job's previous token plus one; a grant to the
     * current live holder keeps its token and extends the lease like Renew.
     * When another holder has a live lease, Acquire answers `acquired = false`
     * with the current lease, at once if `wait` is zero. When `wait` &gt; 0 it
     * blocks up to `wait` and grants as soon as the lease frees up (release or
     * expiry). Waiters on one job are served first come, first served; while
     * any waiter is queued, an Acquire that does not wait is not granted ahead
     * of it. A waiting Acquire is woken by the release or by the expiry
     * deadline itself; it never polls.
     * A grant is on stable storage before the reply.
     * With `bind_to_stream`, the grant is bound to the caller's connection
     * (see AcquireRequest.bind_to_stream): it is released at once when the
     * client's end of that connection closes or resets, as when its process
     * dies.
     * </pre>
     */
    public dev.leasehold.v1.AcquireResponse acquire(dev.leasehold.v1.AcquireRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAcquireMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Renew extends a live lease held by `holder` with `token` by `ttl`,
     * counted from now. Anything else (the lease expired, another holder,
     * another token, the lease was released) fails with FAILED_PRECONDITION and
     * reason LEASE_LOST. A renewal never changes the token.
     * </pre>
     */
    public dev.leasehold.v1.RenewResponse renew(dev.leasehold.v1.RenewRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getRenewMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Release steps down voluntarily. The lease is free at once, the first
     * waiting Acquire is granted, and the next grant carries a higher token.
     * Releasing a lease that is no longer held by `holder` with `token` fails
     * with FAILED_PRECONDITION, reason LEASE_LOST, and changes nothing.
     * </pre>
     */
    public dev.leasehold.v1.ReleaseResponse release(dev.leasehold.v1.ReleaseRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReleaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * TransferLease hands the live lease of `holder` with `token` to a
     * waiting Acquire, in one durable decision: the successor is granted
     * the next token (`token` + 1) with no moment when the job is free, and
     * its waiting Acquire returns at once. The successor is the first
     * waiter in line whose holder is `to_holder`, or the first waiter in
     * line when `to_holder` is empty.
     * - No such waiter: FAILED_PRECONDITION, reason NO_SUCCESSOR, and
     *   nothing changes (the caller still leads).
     * - The lease is not `holder`'s with `token` (expired, released, moved
     *   on, or handed over by a concurrent transfer): FAILED_PRECONDITION,
     *   reason LEASE_LOST, as Renew would answer, and nothing changes.
     * The history records the tenure's end as TRANSFERRED, and watchers see
     * the successor's grant (ACQUIRED). With a policy, this is action
     * `lease`, and the lease must be the caller's principal's.
     * </pre>
     */
    public dev.leasehold.v1.TransferLeaseResponse transferLease(dev.leasehold.v1.TransferLeaseRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getTransferLeaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * GetLease returns the job's lease. A job never granted has token 0; a job
     * that is free keeps its last token and has an empty holder.
     * </pre>
     */
    public dev.leasehold.v1.Lease getLease(dev.leasehold.v1.GetLeaseRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetLeaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * DeleteJob removes a job, every key of its fenced store and its history
     * of leaders, to give their room back. Refused with FAILED_PRECONDITION, reason JOB_IN_USE, while the
     * job's lease is live or an Acquire waits for it; nothing changes then.
     * A job that does not exist is not an error (`deleted` is false).
     * Tokens never go back: a job created again under the same name gets
     * tokens above every token the deleted job issued (the server keeps a
     * store-wide floor, raised by each deletion). Until then GetLease shows the
     * job as never granted (token 0). With a policy, this is action `admin`.
     * </pre>
     */
    public dev.leasehold.v1.DeleteJobResponse deleteJob(dev.leasehold.v1.DeleteJobRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDeleteJobMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListLeases lists every job the server knows, ordered by job name. With a
     * policy, only the jobs the caller may read: it needs a `read` grant
     * somewhere (PERMISSION_DENIED otherwise), and a page, its
     * `next_page_token` and an empty page say nothing of the other jobs.
     * </pre>
     */
    public dev.leasehold.v1.ListLeasesResponse listLeases(dev.leasehold.v1.ListLeasesRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListLeasesMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * GetHistory returns the job's history of leaders, newest first: one
     * Tenure per token granted (a token's time as leader), with how it
     * ended. The server keeps the tenures of each job's newest tokens
     * (`leasehold serve --history-per-job`, default 100), stored with the
     * same durability as the grants themselves: a tenure a client was told
     * of is in the history, whatever crashes. DeleteJob removes the job's
     * history with it, so that jobs created and deleted without end leave
     * nothing behind (read it first if it matters). A job with no history
     * has an empty one (not an error). With a policy, this is
     * action `read`.
     * Its times are on the server's wall clock, for people (a post-mortem
     * asking which token led when a write was made). No rule reads them:
     * lease timing is on the monotonic clock, and a wall-clock jump moves
     * these times, never a lease.
     * </pre>
     */
    public dev.leasehold.v1.GetHistoryResponse getHistory(dev.leasehold.v1.GetHistoryRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetHistoryMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * WatchLease sends the job's current lease first (kind CURRENT), then an
     * event for every change of holder or token as it happens: ACQUIRED,
     * RELEASED or EXPIRED, and VALUE_CHANGED when the holder changes the
     * lease's value. Renewals that change no value send nothing. A watcher that falls behind
     * is not buffered without bound: it receives the latest state, and changes
     * it did not read in time are folded into that one event.
     * </pre>
     */
    public java.util.Iterator<dev.leasehold.v1.LeaseEvent> watchLease(
        dev.leasehold.v1.WatchLeaseRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getWatchLeaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * The public keys that verify grants' proofs (`Lease.proof`), as a JWKS
     * (RFC 7517) and as a list. The first signs new grants; every one listed
     * verifies. Also served at GET /keys on the admin port. Needs no grant.
     * </pre>
     */
    public dev.leasehold.v1.GetSigningKeysResponse getSigningKeys(dev.leasehold.v1.GetSigningKeysRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetSigningKeysMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListWaiters returns the Acquires waiting for the job, in line order
     * (the preferred candidates first, then the others, each class first
     * come, first served): the order in which a release would hand the
     * lease over. A job nobody waits for, or that does not exist, has an
     * empty line (not an error). With a policy, this is action `read`. For
     * a counted job (AcquireRequest.slots), the first listed is the Acquire
     * that holds the line's turn (listed as not preferred), then those
     * waiting for the turn.
     * </pre>
     */
    public dev.leasehold.v1.ListWaitersResponse listWaiters(dev.leasehold.v1.ListWaitersRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListWaitersMethod(), getCallOptions(), request);
    }
  }

  /**
   * A stub to allow clients to do ListenableFuture-style rpc calls to service Leases.
   * <pre>
   * Leases grants, renews and releases per-job leases.
   * </pre>
   */
  public static final class LeasesFutureStub
      extends io.grpc.stub.AbstractFutureStub<LeasesFutureStub> {
    private LeasesFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LeasesFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LeasesFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Acquire grants the lease on `job` to `holder` when it is free, expired,
     * or already held by `holder`. A grant to a new holder, or after expiry or
     * release, carries the job's previous token plus one; a grant to the
     * current live holder keeps its token and extends the lease like Renew.
     * When another holder has a live lease, Acquire answers `acquired = false`
     * with the current lease, at once if `wait` is zero. When `wait` &gt; 0 it
     * blocks up to `wait` and grants as soon as the lease frees up (release or
     * expiry). Waiters on one job are served first come, first served; while
     * any waiter is queued, an Acquire that does not wait is not granted ahead
     * of it. A waiting Acquire is woken by the release or by the expiry
     * deadline itself; it never polls.
     * A grant is on stable storage before the reply.
     * With `bind_to_stream`, the grant is bound to the caller's connection
     * (see AcquireRequest.bind_to_stream): it is released at once when the
     * client's end of that connection closes or resets, as when its process
     * dies.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.AcquireResponse> acquire(
        dev.leasehold.v1.AcquireRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAcquireMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Renew extends a live lease held by `holder` with `token` by `ttl`,
     * counted from now. Anything else (the lease expired, another holder,
     * another token, the lease was released) fails with FAILED_PRECONDITION and
     * reason LEASE_LOST. A renewal never changes the token.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.RenewResponse> renew(
        dev.leasehold.v1.RenewRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getRenewMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Release steps down voluntarily. The lease is free at once, the first
     * waiting Acquire is granted, and the next grant carries a higher token.
     * Releasing a lease that is no longer held by `holder` with `token` fails
     * with FAILED_PRECONDITION, reason LEASE_LOST, and changes nothing.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ReleaseResponse> release(
        dev.leasehold.v1.ReleaseRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReleaseMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * TransferLease hands the live lease of `holder` with `token` to a
     * waiting Acquire, in one durable decision: the successor is granted
     * the next token (`token` + 1) with no moment when the job is free, and
     * its waiting Acquire returns at once. The successor is the first
     * waiter in line whose holder is `to_holder`, or the first waiter in
     * line when `to_holder` is empty.
     * - No such waiter: FAILED_PRECONDITION, reason NO_SUCCESSOR, and
     *   nothing changes (the caller still leads).
     * - The lease is not `holder`'s with `token` (expired, released, moved
     *   on, or handed over by a concurrent transfer): FAILED_PRECONDITION,
     *   reason LEASE_LOST, as Renew would answer, and nothing changes.
     * The history records the tenure's end as TRANSFERRED, and watchers see
     * the successor's grant (ACQUIRED). With a policy, this is action
     * `lease`, and the lease must be the caller's principal's.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.TransferLeaseResponse> transferLease(
        dev.leasehold.v1.TransferLeaseRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getTransferLeaseMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * GetLease returns the job's lease. A job never granted has token 0; a job
     * that is free keeps its last token and has an empty holder.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.Lease> getLease(
        dev.leasehold.v1.GetLeaseRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetLeaseMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * DeleteJob removes a job, every key of its fenced store and its history
     * of leaders, to give their room back. Refused with FAILED_PRECONDITION, reason JOB_IN_USE, while the
     * job's lease is live or an Acquire waits for it; nothing changes then.
     * A job that does not exist is not an error (`deleted` is false).
     * Tokens never go back: a job created again under the same name gets
     * tokens above every token the deleted job issued (the server keeps a
     * store-wide floor, raised by each deletion). Until then GetLease shows the
     * job as never granted (token 0). With a policy, this is action `admin`.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.DeleteJobResponse> deleteJob(
        dev.leasehold.v1.DeleteJobRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDeleteJobMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ListLeases lists every job the server knows, ordered by job name. With a
     * policy, only the jobs the caller may read: it needs a `read` grant
     * somewhere (PERMISSION_DENIED otherwise), and a page, its
     * `next_page_token` and an empty page say nothing of the other jobs.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ListLeasesResponse> listLeases(
        dev.leasehold.v1.ListLeasesRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListLeasesMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * GetHistory returns the job's history of leaders, newest first: one
     * Tenure per token granted (a token's time as leader), with how it
     * ended. The server keeps the tenures of each job's newest tokens
     * (`leasehold serve --history-per-job`, default 100), stored with the
     * same durability as the grants themselves: a tenure a client was told
     * of is in the history, whatever crashes. DeleteJob removes the job's
     * history with it, so that jobs created and deleted without end leave
     * nothing behind (read it first if it matters). A job with no history
     * has an empty one (not an error). With a policy, this is
     * action `read`.
     * Its times are on the server's wall clock, for people (a post-mortem
     * asking which token led when a write was made). No rule reads them:
     * lease timing is on the monotonic clock, and a wall-clock jump moves
     * these times, never a lease.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.GetHistoryResponse> getHistory(
        dev.leasehold.v1.GetHistoryRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetHistoryMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * The public keys that verify grants' proofs (`Lease.proof`), as a JWKS
     * (RFC 7517) and as a list. The first signs new grants; every one listed
     * verifies. Also served at GET /keys on the admin port. Needs no grant.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.GetSigningKeysResponse> getSigningKeys(
        dev.leasehold.v1.GetSigningKeysRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetSigningKeysMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ListWaiters returns the Acquires waiting for the job, in line order
     * (the preferred candidates first, then the others, each class first
     * come, first served): the order in which a release would hand the
     * lease over. A job nobody waits for, or that does not exist, has an
     * empty line (not an error). With a policy, this is action `read`. For
     * a counted job (AcquireRequest.slots), the first listed is the Acquire
     * that holds the line's turn (listed as not preferred), then those
     * waiting for the turn.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.leasehold.v1.ListWaitersResponse> listWaiters(
        dev.leasehold.v1.ListWaitersRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListWaitersMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_ACQUIRE = 0;
  private static final int METHODID_RENEW = 1;
  private static final int METHODID_RELEASE = 2;
  private static final int METHODID_TRANSFER_LEASE = 3;
  private static final int METHODID_GET_LEASE = 4;
  private static final int METHODID_DELETE_JOB = 5;
  private static final int METHODID_LIST_LEASES = 6;
  private static final int METHODID_GET_HISTORY = 7;
  private static final int METHODID_WATCH_LEASE = 8;
  private static final int METHODID_GET_SIGNING_KEYS = 9;
  private static final int METHODID_LIST_WAITERS = 10;
  private static final int METHODID_KEEP_ALIVE = 11;

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
        case METHODID_ACQUIRE:
          serviceImpl.acquire((dev.leasehold.v1.AcquireRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.AcquireResponse>) responseObserver);
          break;
        case METHODID_RENEW:
          serviceImpl.renew((dev.leasehold.v1.RenewRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.RenewResponse>) responseObserver);
          break;
        case METHODID_RELEASE:
          serviceImpl.release((dev.leasehold.v1.ReleaseRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ReleaseResponse>) responseObserver);
          break;
        case METHODID_TRANSFER_LEASE:
          serviceImpl.transferLease((dev.leasehold.v1.TransferLeaseRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.TransferLeaseResponse>) responseObserver);
          break;
        case METHODID_GET_LEASE:
          serviceImpl.getLease((dev.leasehold.v1.GetLeaseRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.Lease>) responseObserver);
          break;
        case METHODID_DELETE_JOB:
          serviceImpl.deleteJob((dev.leasehold.v1.DeleteJobRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.DeleteJobResponse>) responseObserver);
          break;
        case METHODID_LIST_LEASES:
          serviceImpl.listLeases((dev.leasehold.v1.ListLeasesRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ListLeasesResponse>) responseObserver);
          break;
        case METHODID_GET_HISTORY:
          serviceImpl.getHistory((dev.leasehold.v1.GetHistoryRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.GetHistoryResponse>) responseObserver);
          break;
        case METHODID_WATCH_LEASE:
          serviceImpl.watchLease((dev.leasehold.v1.WatchLeaseRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.LeaseEvent>) responseObserver);
          break;
        case METHODID_GET_SIGNING_KEYS:
          serviceImpl.getSigningKeys((dev.leasehold.v1.GetSigningKeysRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.GetSigningKeysResponse>) responseObserver);
          break;
        case METHODID_LIST_WAITERS:
          serviceImpl.listWaiters((dev.leasehold.v1.ListWaitersRequest) request,
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.ListWaitersResponse>) responseObserver);
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
        case METHODID_KEEP_ALIVE:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.keepAlive(
              (io.grpc.stub.StreamObserver<dev.leasehold.v1.KeepAliveResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  public static final io.grpc.ServerServiceDefinition bindService(AsyncService service) {
    return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
        .addMethod(
          getAcquireMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.AcquireRequest,
              dev.leasehold.v1.AcquireResponse>(
                service, METHODID_ACQUIRE)))
        .addMethod(
          getRenewMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.RenewRequest,
              dev.leasehold.v1.RenewResponse>(
                service, METHODID_RENEW)))
        .addMethod(
          getReleaseMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ReleaseRequest,
              dev.leasehold.v1.ReleaseResponse>(
                service, METHODID_RELEASE)))
        .addMethod(
          getTransferLeaseMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.TransferLeaseRequest,
              dev.leasehold.v1.TransferLeaseResponse>(
                service, METHODID_TRANSFER_LEASE)))
        .addMethod(
          getGetLeaseMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.GetLeaseRequest,
              dev.leasehold.v1.Lease>(
                service, METHODID_GET_LEASE)))
        .addMethod(
          getDeleteJobMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.DeleteJobRequest,
              dev.leasehold.v1.DeleteJobResponse>(
                service, METHODID_DELETE_JOB)))
        .addMethod(
          getListLeasesMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ListLeasesRequest,
              dev.leasehold.v1.ListLeasesResponse>(
                service, METHODID_LIST_LEASES)))
        .addMethod(
          getGetHistoryMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.GetHistoryRequest,
              dev.leasehold.v1.GetHistoryResponse>(
                service, METHODID_GET_HISTORY)))
        .addMethod(
          getWatchLeaseMethod(),
          io.grpc.stub.ServerCalls.asyncServerStreamingCall(
            new MethodHandlers<
              dev.leasehold.v1.WatchLeaseRequest,
              dev.leasehold.v1.LeaseEvent>(
                service, METHODID_WATCH_LEASE)))
        .addMethod(
          getKeepAliveMethod(),
          io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
            new MethodHandlers<
              dev.leasehold.v1.KeepAliveRequest,
              dev.leasehold.v1.KeepAliveResponse>(
                service, METHODID_KEEP_ALIVE)))
        .addMethod(
          getGetSigningKeysMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.GetSigningKeysRequest,
              dev.leasehold.v1.GetSigningKeysResponse>(
                service, METHODID_GET_SIGNING_KEYS)))
        .addMethod(
          getListWaitersMethod(),
          io.grpc.stub.ServerCalls.asyncUnaryCall(
            new MethodHandlers<
              dev.leasehold.v1.ListWaitersRequest,
              dev.leasehold.v1.ListWaitersResponse>(
                service, METHODID_LIST_WAITERS)))
        .build();
  }

  private static abstract class LeasesBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    LeasesBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.leasehold.v1.Leasehold.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Leases");
    }
  }

  private static final class LeasesFileDescriptorSupplier
      extends LeasesBaseDescriptorSupplier {
    LeasesFileDescriptorSupplier() {}
  }

  private static final class LeasesMethodDescriptorSupplier
      extends LeasesBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final java.lang.String methodName;

    LeasesMethodDescriptorSupplier(java.lang.String methodName) {
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
      synchronized (LeasesGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new LeasesFileDescriptorSupplier())
              .addMethod(getAcquireMethod())
              .addMethod(getRenewMethod())
              .addMethod(getReleaseMethod())
              .addMethod(getTransferLeaseMethod())
              .addMethod(getGetLeaseMethod())
              .addMethod(getDeleteJobMethod())
              .addMethod(getListLeasesMethod())
              .addMethod(getGetHistoryMethod())
              .addMethod(getWatchLeaseMethod())
              .addMethod(getKeepAliveMethod())
              .addMethod(getGetSigningKeysMethod())
              .addMethod(getListWaitersMethod())
              .build();
        }
      }
    }
    return result;
  }
}
