import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_LEASE_LOST: _ClassVar[ErrorReason]
    ERROR_REASON_FENCED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_ARGUMENT: _ClassVar[ErrorReason]
    ERROR_REASON_UNKNOWN_TOKEN: _ClassVar[ErrorReason]
    ERROR_REASON_STORAGE: _ClassVar[ErrorReason]
    ERROR_REASON_SHUTTING_DOWN: _ClassVar[ErrorReason]
    ERROR_REASON_DISK_FULL: _ClassVar[ErrorReason]
    ERROR_REASON_TOKENS_EXHAUSTED: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHENTICATED: _ClassVar[ErrorReason]
    ERROR_REASON_PERMISSION_DENIED: _ClassVar[ErrorReason]
    ERROR_REASON_OVERLOADED: _ClassVar[ErrorReason]
    ERROR_REASON_QUOTA_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_JOB_IN_USE: _ClassVar[ErrorReason]
    ERROR_REASON_NO_SUCCESSOR: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_LEASE_LOST: ErrorReason
ERROR_REASON_FENCED: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_UNKNOWN_TOKEN: ErrorReason
ERROR_REASON_STORAGE: ErrorReason
ERROR_REASON_SHUTTING_DOWN: ErrorReason
ERROR_REASON_DISK_FULL: ErrorReason
ERROR_REASON_TOKENS_EXHAUSTED: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_PERMISSION_DENIED: ErrorReason
ERROR_REASON_OVERLOADED: ErrorReason
ERROR_REASON_QUOTA_EXCEEDED: ErrorReason
ERROR_REASON_JOB_IN_USE: ErrorReason
ERROR_REASON_NO_SUCCESSOR: ErrorReason

class Lease(_message.Message):
    __slots__ = ("job", "holder", "token", "ttl", "remaining", "principal", "proof", "value", "slot", "slots")
    JOB_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    job: str
    holder: str
    token: int
    ttl: _duration_pb2.Duration
    remaining: _duration_pb2.Duration
    principal: str
    proof: str
    value: bytes
    slot: int
    slots: int
    def __init__(self, job: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., remaining: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., principal: _Optional[str] = ..., proof: _Optional[str] = ..., value: _Optional[bytes] = ..., slot: _Optional[int] = ..., slots: _Optional[int] = ...) -> None: ...

class GetSigningKeysRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSigningKeysResponse(_message.Message):
    __slots__ = ("jwks", "keys")
    JWKS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    jwks: str
    keys: _containers.RepeatedCompositeFieldContainer[SigningKey]
    def __init__(self, jwks: _Optional[str] = ..., keys: _Optional[_Iterable[_Union[SigningKey, _Mapping]]] = ...) -> None: ...

class SigningKey(_message.Message):
    __slots__ = ("kid", "public_key", "signing")
    KID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNING_FIELD_NUMBER: _ClassVar[int]
    kid: str
    public_key: bytes
    signing: bool
    def __init__(self, kid: _Optional[str] = ..., public_key: _Optional[bytes] = ..., signing: _Optional[bool] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("job", "holder", "ttl", "wait", "bind_to_stream", "preferred", "value", "slots")
    JOB_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    BIND_TO_STREAM_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    job: str
    holder: str
    ttl: _duration_pb2.Duration
    wait: _duration_pb2.Duration
    bind_to_stream: bool
    preferred: bool
    value: bytes
    slots: int
    def __init__(self, job: _Optional[str] = ..., holder: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., bind_to_stream: _Optional[bool] = ..., preferred: _Optional[bool] = ..., value: _Optional[bytes] = ..., slots: _Optional[int] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("acquired", "lease")
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    lease: Lease
    def __init__(self, acquired: _Optional[bool] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("job", "holder", "token", "ttl", "value")
    JOB_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    job: str
    holder: str
    token: int
    ttl: _duration_pb2.Duration
    value: bytes
    def __init__(self, job: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., value: _Optional[bytes] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("lease", "successor_waiting")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    SUCCESSOR_WAITING_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    successor_waiting: bool
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., successor_waiting: _Optional[bool] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("job", "holder", "token", "give_back")
    JOB_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    GIVE_BACK_FIELD_NUMBER: _ClassVar[int]
    job: str
    holder: str
    token: int
    give_back: bool
    def __init__(self, job: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., give_back: _Optional[bool] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...

class TransferLeaseRequest(_message.Message):
    __slots__ = ("job", "holder", "token", "to_holder", "ttl")
    JOB_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TO_HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    job: str
    holder: str
    token: int
    to_holder: str
    ttl: _duration_pb2.Duration
    def __init__(self, job: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., to_holder: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class TransferLeaseResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class GetLeaseRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ListWaitersRequest(_message.Message):
    __slots__ = ("job", "limit")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job: str
    limit: int
    def __init__(self, job: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListWaitersResponse(_message.Message):
    __slots__ = ("waiters", "waiting")
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    waiters: _containers.RepeatedCompositeFieldContainer[Waiter]
    waiting: int
    def __init__(self, waiters: _Optional[_Iterable[_Union[Waiter, _Mapping]]] = ..., waiting: _Optional[int] = ...) -> None: ...

class Waiter(_message.Message):
    __slots__ = ("holder", "principal", "preferred")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_FIELD_NUMBER: _ClassVar[int]
    holder: str
    principal: str
    preferred: bool
    def __init__(self, holder: _Optional[str] = ..., principal: _Optional[str] = ..., preferred: _Optional[bool] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListLeasesRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListLeasesResponse(_message.Message):
    __slots__ = ("leases", "next_page_token")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    next_page_token: str
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ("job", "page_size", "page_token")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job: str
    page_size: int
    page_token: str
    def __init__(self, job: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ("tenures", "next_page_token", "chaos")
    TENURES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CHAOS_FIELD_NUMBER: _ClassVar[int]
    tenures: _containers.RepeatedCompositeFieldContainer[Tenure]
    next_page_token: str
    chaos: _containers.RepeatedCompositeFieldContainer[ChaosEvent]
    def __init__(self, tenures: _Optional[_Iterable[_Union[Tenure, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., chaos: _Optional[_Iterable[_Union[ChaosEvent, _Mapping]]] = ...) -> None: ...

class ChaosEvent(_message.Message):
    __slots__ = ("at", "action", "detail")
    AT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    action: str
    detail: str
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., action: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class Tenure(_message.Message):
    __slots__ = ("token", "holder", "principal", "granted_at", "ttl", "end", "ended_at", "value")
    class End(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        END_UNSPECIFIED: _ClassVar[Tenure.End]
        END_RELEASED: _ClassVar[Tenure.End]
        END_EXPIRED: _ClassVar[Tenure.End]
        END_TAKEN_OVER: _ClassVar[Tenure.End]
        END_DELETED: _ClassVar[Tenure.End]
        END_RESTORED: _ClassVar[Tenure.End]
        END_RECOVERED: _ClassVar[Tenure.End]
        END_CONNECTION_CLOSED: _ClassVar[Tenure.End]
        END_TRANSFERRED: _ClassVar[Tenure.End]
        END_CHAOS: _ClassVar[Tenure.End]
    END_UNSPECIFIED: Tenure.End
    END_RELEASED: Tenure.End
    END_EXPIRED: Tenure.End
    END_TAKEN_OVER: Tenure.End
    END_DELETED: Tenure.End
    END_RESTORED: Tenure.End
    END_RECOVERED: Tenure.End
    END_CONNECTION_CLOSED: Tenure.End
    END_TRANSFERRED: Tenure.End
    END_CHAOS: Tenure.End
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    GRANTED_AT_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    token: int
    holder: str
    principal: str
    granted_at: _timestamp_pb2.Timestamp
    ttl: _duration_pb2.Duration
    end: Tenure.End
    ended_at: _timestamp_pb2.Timestamp
    value: bytes
    def __init__(self, token: _Optional[int] = ..., holder: _Optional[str] = ..., principal: _Optional[str] = ..., granted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., end: _Optional[_Union[Tenure.End, str]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., value: _Optional[bytes] = ...) -> None: ...

class WatchLeaseRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class LeaseEvent(_message.Message):
    __slots__ = ("lease", "kind")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[LeaseEvent.Kind]
        KIND_CURRENT: _ClassVar[LeaseEvent.Kind]
        KIND_ACQUIRED: _ClassVar[LeaseEvent.Kind]
        KIND_RELEASED: _ClassVar[LeaseEvent.Kind]
        KIND_EXPIRED: _ClassVar[LeaseEvent.Kind]
        KIND_VALUE_CHANGED: _ClassVar[LeaseEvent.Kind]
    KIND_UNSPECIFIED: LeaseEvent.Kind
    KIND_CURRENT: LeaseEvent.Kind
    KIND_ACQUIRED: LeaseEvent.Kind
    KIND_RELEASED: LeaseEvent.Kind
    KIND_EXPIRED: LeaseEvent.Kind
    KIND_VALUE_CHANGED: LeaseEvent.Kind
    LEASE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    kind: LeaseEvent.Kind
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., kind: _Optional[_Union[LeaseEvent.Kind, str]] = ...) -> None: ...

class CheckedWriteRequest(_message.Message):
    __slots__ = ("job", "token", "key", "value", "delete", "proof")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    job: str
    token: int
    key: bytes
    value: bytes
    delete: bool
    proof: str
    def __init__(self, job: _Optional[str] = ..., token: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., delete: _Optional[bool] = ..., proof: _Optional[str] = ...) -> None: ...

class CheckedWriteResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class WriteStreamRequest(_message.Message):
    __slots__ = ("id", "writes")
    ID_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    id: int
    writes: _containers.RepeatedCompositeFieldContainer[CheckedWriteRequest]
    def __init__(self, id: _Optional[int] = ..., writes: _Optional[_Iterable[_Union[CheckedWriteRequest, _Mapping]]] = ...) -> None: ...

class WriteStreamResponse(_message.Message):
    __slots__ = ("id", "results")
    ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    id: int
    results: _containers.RepeatedCompositeFieldContainer[WriteResult]
    def __init__(self, id: _Optional[int] = ..., results: _Optional[_Iterable[_Union[WriteResult, _Mapping]]] = ...) -> None: ...

class WriteResult(_message.Message):
    __slots__ = ("outcome", "version", "current_token", "field", "message")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[WriteResult.Outcome]
        OUTCOME_WRITTEN: _ClassVar[WriteResult.Outcome]
        OUTCOME_FENCED: _ClassVar[WriteResult.Outcome]
        OUTCOME_UNKNOWN_TOKEN: _ClassVar[WriteResult.Outcome]
        OUTCOME_INVALID_ARGUMENT: _ClassVar[WriteResult.Outcome]
        OUTCOME_QUOTA_EXCEEDED: _ClassVar[WriteResult.Outcome]
    OUTCOME_UNSPECIFIED: WriteResult.Outcome
    OUTCOME_WRITTEN: WriteResult.Outcome
    OUTCOME_FENCED: WriteResult.Outcome
    OUTCOME_UNKNOWN_TOKEN: WriteResult.Outcome
    OUTCOME_INVALID_ARGUMENT: WriteResult.Outcome
    OUTCOME_QUOTA_EXCEEDED: WriteResult.Outcome
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    outcome: WriteResult.Outcome
    version: int
    current_token: int
    field: str
    message: str
    def __init__(self, outcome: _Optional[_Union[WriteResult.Outcome, str]] = ..., version: _Optional[int] = ..., current_token: _Optional[int] = ..., field: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("job", "key")
    JOB_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    job: str
    key: bytes
    def __init__(self, job: _Optional[str] = ..., key: _Optional[bytes] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("found", "value", "token", "version")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    token: int
    version: int
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ..., token: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ("job", "prefix", "page_size", "page_token")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job: str
    prefix: bytes
    page_size: int
    page_token: bytes
    def __init__(self, job: _Optional[str] = ..., prefix: _Optional[bytes] = ..., page_size: _Optional[int] = ..., page_token: _Optional[bytes] = ...) -> None: ...

class KeyInfo(_message.Message):
    __slots__ = ("key", "token", "version", "size")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    token: int
    version: int
    size: int
    def __init__(self, key: _Optional[bytes] = ..., token: _Optional[int] = ..., version: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ("keys", "next_page_token")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[KeyInfo]
    next_page_token: bytes
    def __init__(self, keys: _Optional[_Iterable[_Union[KeyInfo, _Mapping]]] = ..., next_page_token: _Optional[bytes] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ("id", "renewals", "bind_to_stream")
    ID_FIELD_NUMBER: _ClassVar[int]
    RENEWALS_FIELD_NUMBER: _ClassVar[int]
    BIND_TO_STREAM_FIELD_NUMBER: _ClassVar[int]
    id: int
    renewals: _containers.RepeatedCompositeFieldContainer[KeepAliveRenewal]
    bind_to_stream: bool
    def __init__(self, id: _Optional[int] = ..., renewals: _Optional[_Iterable[_Union[KeepAliveRenewal, _Mapping]]] = ..., bind_to_stream: _Optional[bool] = ...) -> None: ...

class KeepAliveRenewal(_message.Message):
    __slots__ = ("job", "holder", "token", "ttl")
    JOB_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    job: str
    holder: str
    token: int
    ttl: _duration_pb2.Duration
    def __init__(self, job: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ("id", "results")
    ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    id: int
    results: _containers.RepeatedCompositeFieldContainer[KeepAliveResult]
    def __init__(self, id: _Optional[int] = ..., results: _Optional[_Iterable[_Union[KeepAliveResult, _Mapping]]] = ...) -> None: ...

class KeepAliveResult(_message.Message):
    __slots__ = ("job", "outcome", "lease", "field", "message", "successor_waiting")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[KeepAliveResult.Outcome]
        OUTCOME_RENEWED: _ClassVar[KeepAliveResult.Outcome]
        OUTCOME_LEASE_LOST: _ClassVar[KeepAliveResult.Outcome]
        OUTCOME_UNKNOWN_TOKEN: _ClassVar[KeepAliveResult.Outcome]
        OUTCOME_INVALID_ARGUMENT: _ClassVar[KeepAliveResult.Outcome]
    OUTCOME_UNSPECIFIED: KeepAliveResult.Outcome
    OUTCOME_RENEWED: KeepAliveResult.Outcome
    OUTCOME_LEASE_LOST: KeepAliveResult.Outcome
    OUTCOME_UNKNOWN_TOKEN: KeepAliveResult.Outcome
    OUTCOME_INVALID_ARGUMENT: KeepAliveResult.Outcome
    JOB_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SUCCESSOR_WAITING_FIELD_NUMBER: _ClassVar[int]
    job: str
    outcome: KeepAliveResult.Outcome
    lease: Lease
    field: str
    message: str
    successor_waiting: bool
    def __init__(self, job: _Optional[str] = ..., outcome: _Optional[_Union[KeepAliveResult.Outcome, str]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., field: _Optional[str] = ..., message: _Optional[str] = ..., successor_waiting: _Optional[bool] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("group", "member", "shards", "ttl", "revoke_timeout", "released")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    group: str
    member: str
    shards: int
    ttl: _duration_pb2.Duration
    revoke_timeout: _duration_pb2.Duration
    released: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, group: _Optional[str] = ..., member: _Optional[str] = ..., shards: _Optional[int] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., revoke_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., released: _Optional[_Iterable[int]] = ...) -> None: ...

class JoinResponse(_message.Message):
    __slots__ = ("kind", "shard", "token", "job", "shards", "deadline")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[JoinResponse.Kind]
        KIND_JOINED: _ClassVar[JoinResponse.Kind]
        KIND_ASSIGNED: _ClassVar[JoinResponse.Kind]
        KIND_REVOKED: _ClassVar[JoinResponse.Kind]
        KIND_LOST: _ClassVar[JoinResponse.Kind]
    KIND_UNSPECIFIED: JoinResponse.Kind
    KIND_JOINED: JoinResponse.Kind
    KIND_ASSIGNED: JoinResponse.Kind
    KIND_REVOKED: JoinResponse.Kind
    KIND_LOST: JoinResponse.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    kind: JoinResponse.Kind
    shard: int
    token: int
    job: str
    shards: int
    deadline: _duration_pb2.Duration
    def __init__(self, kind: _Optional[_Union[JoinResponse.Kind, str]] = ..., shard: _Optional[int] = ..., token: _Optional[int] = ..., job: _Optional[str] = ..., shards: _Optional[int] = ..., deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GetGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class ShardGroup(_message.Message):
    __slots__ = ("group", "shards", "members", "owners")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    group: str
    shards: int
    members: _containers.RepeatedCompositeFieldContainer[ShardGroupMember]
    owners: _containers.RepeatedCompositeFieldContainer[ShardOwner]
    def __init__(self, group: _Optional[str] = ..., shards: _Optional[int] = ..., members: _Optional[_Iterable[_Union[ShardGroupMember, _Mapping]]] = ..., owners: _Optional[_Iterable[_Union[ShardOwner, _Mapping]]] = ...) -> None: ...

class ShardGroupMember(_message.Message):
    __slots__ = ("member", "shards")
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    member: str
    shards: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, member: _Optional[str] = ..., shards: _Optional[_Iterable[int]] = ...) -> None: ...

class ShardOwner(_message.Message):
    __slots__ = ("shard", "job", "member", "token")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    shard: int
    job: str
    member: str
    token: int
    def __init__(self, shard: _Optional[int] = ..., job: _Optional[str] = ..., member: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...
