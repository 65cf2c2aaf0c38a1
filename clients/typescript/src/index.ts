/**
 * leasehold for TypeScript / Node.js: a promise-based `Client`, the
 * `Elector` (an EventEmitter), `client.lock` / `withLock` for a critical
 * section, the `ElectorSet` for many jobs renewed over one stream, the
 * `WriteStream` for many fenced writes
 * over one stream, `client.joinShards` for a member of a shard group (an
 * async iterable of its shards' events, with `run` for work per shard), `verifyProof` for a grant's signed proof (`Lease.proof`,
 * docs/proofs.md), `client.chaos()` for tests (the chaos API of a server
 * run with `--enable-chaos`), and typed errors, on @grpc/grpc-js with
 * types generated from proto/leasehold/v1/leasehold.proto by ts-proto.
 *
 * ```ts
 * const client = new Client("127.0.0.1:50051");
 * const elector = new Elector(client, "bridge_health", "bridge", 10_000).start();
 * const token = await elector.elected();
 * await client.checkedWrite("bridge_health", token!, "status", "ok");
 * const stream = client.writeStream(); // many writes, cheaply
 * await stream.write([{ job: "bridge_health", token: token!, key: "seen", value: "1" }]);
 * await stream.close();
 * await elector.resign();
 * for await (const lease of client.observe("bridge_health", { signal })) {
 *   console.log(lease.kind, lease.holder, lease.token); // every change of holder, token or value
 * }
 * ```
 */
export { Client, DEFAULT_TARGET, DEFAULT_TIMEOUT_MS, normalizeTarget, RECONNECT_OPTIONS, Watch } from "./client";
export type {
  AcquireOptions,
  CallOptions,
  ClientConfig,
  HistoryOptions,
  ObserveOptions,
  RenewOptions,
  WriteOptions,
} from "./client";
export { Chaos } from "./chaos";
export type { ChaosOutcome } from "./chaos";
export { Elector, NotLeader } from "./elector";
export type { ElectedOptions, ElectorEvents, ElectorLogger, ElectorOptions } from "./elector";
export { ElectorSet } from "./electorset";
export type { ElectorSetEvents, ElectorSetOptions } from "./electorset";
export { DEFAULT_LOCK_NAME, Lock } from "./lock";
export type { LockOptions } from "./lock";
export { KeepAlive } from "./keepalive";
export type { KeepAliveOutcome, KeepAliveRenewal } from "./keepalive";
export {
  ChaosDisabled,
  DiskFull,
  DOMAIN,
  errorInfo,
  Fenced,
  fromServiceError,
  fromStatus,
  InvalidArgument,
  JobInUse,
  LeaseholdError,
  LeaseLost,
  LockTimeout,
  NoSuccessor,
  Overloaded,
  PermissionDenied,
  QuotaExceeded,
  ShuttingDown,
  StorageError,
  Unauthenticated,
  Unavailable,
  UnknownToken,
} from "./errors";
export { KeySet, ProofError, ProofErrorKind, verifyProof } from "./proof";
export type { Jwk, Jwks, ProofCheck, ProofClaims } from "./proof";
export { DEFAULT_SHARD_TTL_MS, MAX_SHARDS, ShardMember } from "./shards";
export type { JoinShardsOptions, Shard, ShardEvent, ShardGroup, ShardGroupMember, ShardOwner, ShardRunOptions } from "./shards";
export { WriteStream } from "./writestream";
export type {
  FencedWrite,
  InvalidWrite,
  QuotaExceededWrite,
  StreamWrite,
  UnknownTokenWrite,
  WriteOutcome,
  Written,
} from "./writestream";
export { EventKind, electorHolder, MAX_VALUE_BYTES, processHolder, TenureEnd } from "./types";
export type {
  Acquired,
  Bytes,
  ChaosEvent,
  HistoryPage,
  KeyInfo,
  Lease,
  LeaseChange,
  LeaseEvent,
  RenewedLease,
  Tenure,
  Value,
  Waiter,
  Waiters,
} from "./types";
export { VERSION } from "./version";
/** The generated messages and grpc-js service clients. */
export * as v1 from "./gen/leasehold/v1/leasehold";
