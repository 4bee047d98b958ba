import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResourceUsage(_message.Message):
    __slots__ = ("peak_rss_bytes", "cpu_time", "reserved_millicpus", "reserved_memory_bytes", "ladder_step", "attempt", "samples")
    PEAK_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_TIME_FIELD_NUMBER: _ClassVar[int]
    RESERVED_MILLICPUS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    LADDER_STEP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    peak_rss_bytes: int
    cpu_time: _duration_pb2.Duration
    reserved_millicpus: int
    reserved_memory_bytes: int
    ladder_step: int
    attempt: int
    samples: int
    def __init__(self, peak_rss_bytes: _Optional[int] = ..., cpu_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reserved_millicpus: _Optional[int] = ..., reserved_memory_bytes: _Optional[int] = ..., ladder_step: _Optional[int] = ..., attempt: _Optional[int] = ..., samples: _Optional[int] = ...) -> None: ...
