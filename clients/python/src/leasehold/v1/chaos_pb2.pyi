import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from leasehold.v1 import leasehold_pb2 as _leasehold_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChaosJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ChaosPauseRequest(_message.Message):
    __slots__ = ("job", "duration")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    job: str
    duration: _duration_pb2.Duration
    def __init__(self, job: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ChaosDelayRequest(_message.Message):
    __slots__ = ("job", "by")
    JOB_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    job: str
    by: _duration_pb2.Duration
    def __init__(self, job: _Optional[str] = ..., by: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ChaosFenceRequest(_message.Message):
    __slots__ = ("job", "writes")
    JOB_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    job: str
    writes: int
    def __init__(self, job: _Optional[str] = ..., writes: _Optional[int] = ...) -> None: ...

class ChaosClearRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ChaosResponse(_message.Message):
    __slots__ = ("lease", "in_force")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    IN_FORCE_FIELD_NUMBER: _ClassVar[int]
    lease: _leasehold_pb2.Lease
    in_force: str
    def __init__(self, lease: _Optional[_Union[_leasehold_pb2.Lease, _Mapping]] = ..., in_force: _Optional[str] = ...) -> None: ...
