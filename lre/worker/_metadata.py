"""``ExecutedActionMetadata`` of one run: wall-clock timestamps and resource use."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.timestamp_pb2 import Timestamp

from lre.proto import lre_pb2, re_pb2

#: The stages whose start and end are timestamped, in order.
STAGES = ("worker", "input_fetch", "execution", "output_upload")


@dataclass(slots=True)
class Timeline:
    """Wall-clock times (``time.time()``) of a run's stages; 0 = not reached."""

    queued: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        """Record ``name`` (e.g. ``"execution_start"``) as happening now."""
        self.marks[name] = time.time()

    def to_proto(self, worker: str) -> re_pb2.ExecutedActionMetadata:
        metadata = re_pb2.ExecutedActionMetadata(worker=worker)
        if self.queued:
            _set(metadata.queued_timestamp, self.queued)
        fields = {
            "worker_start": metadata.worker_start_timestamp,
            "worker_completed": metadata.worker_completed_timestamp,
            "input_fetch_start": metadata.input_fetch_start_timestamp,
            "input_fetch_completed": metadata.input_fetch_completed_timestamp,
            "execution_start": metadata.execution_start_timestamp,
            "execution_completed": metadata.execution_completed_timestamp,
            "output_upload_start": metadata.output_upload_start_timestamp,
            "output_upload_completed": metadata.output_upload_completed_timestamp,
        }
        for name, stamp in fields.items():
            value = self.marks.get(name)
            if value:
                _set(stamp, value)
        start = self.marks.get("execution_start")
        end = self.marks.get("execution_completed")
        if start and end:
            metadata.virtual_execution_duration.FromNanoseconds(int((end - start) * 1e9))
        return metadata


def _set(stamp: Timestamp, seconds: float) -> None:
    """Set a Timestamp field in place (cheaper than ``FromNanoseconds``)."""
    nanos = int(seconds * 1e9)
    stamp.seconds = nanos // 1_000_000_000
    stamp.nanos = nanos % 1_000_000_000


def resource_usage_any(
    *,
    peak_rss_bytes: int,
    cpu_seconds: float,
    reserved_millicpus: int,
    reserved_memory_bytes: int,
    ladder_step: int,
    attempt: int,
    samples: int,
) -> AnyMessage:
    """An ``lre.v1.ResourceUsage`` packed in ``google.protobuf.Any``."""
    usage = lre_pb2.ResourceUsage(
        peak_rss_bytes=peak_rss_bytes,
        reserved_millicpus=reserved_millicpus,
        reserved_memory_bytes=reserved_memory_bytes,
        ladder_step=ladder_step,
        attempt=attempt,
        samples=samples,
    )
    usage.cpu_time.FromNanoseconds(int(cpu_seconds * 1e9))
    packed = AnyMessage()
    packed.Pack(usage)
    return packed
