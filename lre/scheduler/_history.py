"""``HistoryTap``: turns every operation that ends into an ``ActionRecord``.

The scheduler calls ``lease_ended`` for every attempt's outcome and
``finished`` once per operation (in ``_complete``, on the Trio thread);
the tap keeps what it needs between the two (peak memory over attempts,
the reservation and worker of the last attempt) and hands the record to
the hook the composition root gave it (the history recorder). A hook that
raises is logged and ignored: recording never ends an operation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lre.errors import LreError
from lre.proto import re_pb2
from lre.scheduler._lease import Lease
from lre.scheduler._model import Backpressure, MemoryExceeded, Outcome
from lre.scheduler._records import OperationState
from lre.snapshot import BOUNDARIES, ActionRecord, Source

log = logging.getLogger(__name__)

RecordHook = Callable[[ActionRecord], None]

#: The boundaries of the phase model (``lre.snapshot.BOUNDARIES``) and their
#: ``ExecutedActionMetadata`` fields; the other timestamps are not kept.
_STAMPS = tuple(
    (name, f"{name}_timestamp")
    for name in dict.fromkeys(bound for pair in BOUNDARIES.values() for bound in pair)
)


def metadata_stamps(metadata: re_pb2.ExecutedActionMetadata) -> dict[str, float]:
    """The phase boundaries set in ``metadata`` by name (``queued``,
    ``worker_start``, ...), in seconds."""
    out: dict[str, float] = {}
    for name, attribute in _STAMPS:
        stamp = getattr(metadata, attribute)
        seconds = stamp.seconds
        if seconds:
            out[name] = seconds + stamp.nanos / 1e9
    return out


@dataclass(slots=True)
class _Attempts:
    peak_rss_bytes: int = 0
    cpu_seconds: float = 0.0
    millicpus: int = 0
    memory_bytes: int = 0
    worker: str = ""
    runs: int = 0  # leases that ran (a declined one does not count)
    freezes: int = 0  # runs the memory control froze at least once
    killed_at: list[float] = field(default_factory=list)


class HistoryTap:
    """See the module docstring. ``clock`` gives the wall-clock end time."""

    def __init__(self, hook: RecordHook, *, clock: Callable[[], float] = time.time) -> None:
        self._hook = hook
        self._clock = clock
        self._attempts: dict[str, _Attempts] = {}

    def lease_ended(self, op: OperationState, lease: Lease, outcome: Outcome) -> None:
        """Note one attempt's outcome (nothing once ``op`` ended: a cancelled
        operation's lease reports after its record was written)."""
        if op.done:
            return
        attempts = self._attempts.get(op.name)
        if attempts is None:
            attempts = self._attempts[op.name] = _Attempts()
        attempts.millicpus = lease.reservation.millicpus
        attempts.memory_bytes = lease.reservation.memory_bytes
        attempts.worker = lease.worker_name
        if not isinstance(outcome, Backpressure):
            attempts.runs += 1
        usage = getattr(outcome, "usage", None)
        if usage is not None:
            attempts.peak_rss_bytes = max(attempts.peak_rss_bytes, usage.peak_rss_bytes)
            attempts.cpu_seconds += usage.cpu_seconds
            if usage.frozen_seconds > 0:
                attempts.freezes += 1
        if isinstance(outcome, MemoryExceeded):
            attempts.peak_rss_bytes = max(attempts.peak_rss_bytes, outcome.peak_rss_bytes)
            attempts.killed_at.append(self._clock())

    def finished(self, op: OperationState, error: LreError | None) -> None:
        """Record ``op`` (done now); never raises."""
        attempts = self._attempts.pop(op.name, None) or _Attempts()
        try:
            self._hook(_record(op, error, attempts, self._clock()))
        except Exception:
            log.exception("recording operation %s in the history failed", op.name)


def _record(
    op: OperationState, error: LreError | None, attempts: _Attempts, now: float
) -> ActionRecord:
    result = op.result
    if op.cached:
        source = Source.EXECUTE_HIT
    elif attempts.runs > 0 or op.attempt > 0:
        source = Source.EXECUTED
    else:
        source = Source.NOT_RUN
    stamps = {}
    exit_code = None
    if result is not None and not op.cached:
        stamps = metadata_stamps(result.execution_metadata)
        if "execution_completed" in stamps:
            exit_code = result.exit_code
    if source is Source.EXECUTED:
        stamps.setdefault("queued", op.queued_at)
    info = op.request_info
    tool = f"{info.tool_name} {info.tool_version}".strip()
    return ActionRecord(
        at=now,
        source=source,
        invocation=info.tool_invocation_id,
        tool=tool,
        instance=op.key.instance_name,
        target=info.target_id,
        mnemonic=info.action_mnemonic,
        action=op.key.action_digest.hash,
        worker=attempts.worker,
        exit_code=exit_code,
        error=error.code.name if error is not None else "",
        submitted_at=op.queued_at,
        waited_for=tuple(sorted(op.waited_for)),
        reserved_millicpus=attempts.millicpus,
        reserved_memory_bytes=attempts.memory_bytes,
        peak_rss_bytes=attempts.peak_rss_bytes,
        cpu_seconds=attempts.cpu_seconds,
        attempts=attempts.runs,
        kills=op.kills,
        retries=op.retries,
        freezes=attempts.freezes,
        stamps=stamps,
        killed_at=tuple(attempts.killed_at),
    )
