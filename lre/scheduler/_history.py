"""``HistoryTap``: turns every operation that ends into an ``ActionRecord``.

The scheduler calls ``lease_ended`` for every attempt's outcome and
``finished`` once per operation (in ``_complete``, on the Trio thread);
the tap keeps what it needs between the two (peak memory over attempts,
the reservation and worker of the last attempt) and hands the hook the
composition root gave it (the history recorder) a ``RecordBuilder``: the
operation's fields taken as they are now, and a function that makes the
``ActionRecord`` of them when called. The Trio thread only takes the
fields; the recorder builds the records in its once-a-second flush, many
at once (per action that is a fraction of building each one here, between
two RPCs, with nothing of it in the CPU caches). The builder may run on any
thread: it reads only what it took, and the operation's ``result``, which
the scheduler never changes once the operation is done.

A hook that raises is logged and ignored: recording never ends an
operation; so is a builder that raises (``build_record``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from lre.errors import LreError
from lre.proto import re_pb2
from lre.scheduler._lease import Lease
from lre.scheduler._model import ActionKey, Backpressure, MemoryExceeded, Outcome, RequestInfo
from lre.scheduler._records import OperationState
from lre.snapshot import BOUNDARIES, MEMORY_SAMPLED, ActionRecord, Source, action_summary

log = logging.getLogger(__name__)

#: Makes one operation's ``ActionRecord`` (from fields taken when it ended).
RecordBuilder = Callable[[], ActionRecord]
#: Receives a builder for every operation that ends.
RecordHook = Callable[[RecordBuilder], None]

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


#: One attempt's lease and outcome, and when it was killed for its memory (or 0).
_Attempt = tuple[Lease, Outcome, float]


class HistoryTap:
    """See the module docstring. ``clock`` gives the wall-clock end time."""

    def __init__(self, hook: RecordHook, *, clock: Callable[[], float] = time.time) -> None:
        self._hook = hook
        self._clock = clock
        self._attempts: dict[str, list[_Attempt]] = {}

    def lease_ended(self, op: OperationState, lease: Lease, outcome: Outcome) -> None:
        """Note one attempt's outcome (nothing once ``op`` ended: a cancelled
        operation's lease reports after its record was written). Only kept
        here: the builder adds the attempts up (leases and outcomes are
        immutable)."""
        if op.done:
            return
        killed_at = self._clock() if isinstance(outcome, MemoryExceeded) else 0.0
        attempts = self._attempts.get(op.name)
        if attempts is None:
            self._attempts[op.name] = [(lease, outcome, killed_at)]
        else:
            attempts.append((lease, outcome, killed_at))

    def finished(self, op: OperationState, error: LreError | None) -> None:
        """Hand the hook ``op``'s builder (``op`` is done now); never raises."""
        attempts = self._attempts.pop(op.name, ())
        try:
            self._hook(
                partial(
                    build_record,
                    _Ended(
                        self._clock(),
                        op.key,
                        op.request_info,
                        op.result,
                        op.cached,
                        op.attempt,
                        op.queued_at,
                        tuple(op.waited_for) if op.waited_for else (),
                        op.kills,
                        op.retries,
                        error,
                        attempts,
                        # a run still going: the operation was cancelled under it
                        op.lease.started_at if op.lease is not None else 0.0,
                        _program(op),
                    ),
                )
            )
        except Exception:
            log.exception("recording operation %s in the history failed", op.name)


class _Ended(NamedTuple):
    """What the record of one operation is made of, taken when it ended
    (a tuple: the cheapest thing to make on the Trio thread)."""

    at: float
    key: ActionKey
    info: RequestInfo
    result: re_pb2.ActionResult | None
    cached: bool
    attempt: int
    queued_at: float
    waited_for: tuple[str, ...]
    kills: int
    retries: int
    error: LreError | None
    attempts: Sequence[_Attempt]
    running_since: float
    #: The base name of the program its command runs ("" when not known).
    program: str


@dataclass(slots=True)
class _Attempts:
    """The attempts of one operation added up."""

    peak_rss_bytes: int = 0
    memory_source: str = ""  # of the attempt whose figure is the peak
    cpu_seconds: float = 0.0
    millicpus: int = 0
    memory_bytes: int = 0
    worker: str = ""
    runs: int = 0  # leases that ran (a declined one does not count)
    freezes: int = 0  # runs the memory control froze at least once
    killed_at: tuple[float, ...] = ()
    kill_reason: str = ""  # the last kill's
    kill_ended: bool = False  # the last run was killed


def _add_up(attempts: Sequence[_Attempt]) -> _Attempts:
    out = _Attempts()
    for lease, outcome, killed_at in attempts:
        out.millicpus = lease.reservation.millicpus
        out.memory_bytes = lease.reservation.memory_bytes
        out.worker = lease.worker_name
        if not isinstance(outcome, Backpressure):
            out.runs += 1
        usage = getattr(outcome, "usage", None)
        if usage is not None:
            if usage.peak_rss_bytes > out.peak_rss_bytes or not out.memory_source:
                out.memory_source = usage.memory_source
            out.peak_rss_bytes = max(out.peak_rss_bytes, usage.peak_rss_bytes)
            out.cpu_seconds += usage.cpu_seconds
            if usage.frozen_seconds > 0:
                out.freezes += 1
        if isinstance(outcome, MemoryExceeded):
            if outcome.peak_rss_bytes > out.peak_rss_bytes:
                out.memory_source = MEMORY_SAMPLED  # a kill is decided on a pass's figure
            out.peak_rss_bytes = max(out.peak_rss_bytes, outcome.peak_rss_bytes)
            out.killed_at += (killed_at,)
            out.kill_reason = outcome.reason or (
                "over the hard ceiling" if outcome.final else "memory was short"
            )
        if not isinstance(outcome, Backpressure):
            out.kill_ended = isinstance(outcome, MemoryExceeded)
    return out


def _program(op: OperationState) -> str:
    """The base name of the program ``op``'s command runs, when the client
    named no mnemonic (it then names the action instead of its digest); ""
    otherwise, or when the command was never read."""
    if op.request_info.action_mnemonic or op.command is None:
        return ""
    return action_summary("", op.command.arguments)


def build_record(ended: _Ended) -> ActionRecord:
    """The ``ActionRecord`` of ``ended`` (the tap's builders call this).
    Raises only on a bug; the recorder logs it and drops that record."""
    result = ended.result
    attempts = _add_up(ended.attempts)
    if ended.cached:
        source = Source.EXECUTE_HIT
    elif attempts.runs > 0 or ended.attempt > 0:
        source = Source.EXECUTED
    else:
        source = Source.NOT_RUN
    stamps = {}
    exit_code = None
    if result is not None and not ended.cached:
        stamps = metadata_stamps(result.execution_metadata)
        if "execution_completed" in stamps:
            exit_code = result.exit_code
    if source is Source.EXECUTED:
        stamps.setdefault("queued", ended.queued_at)
        if ended.running_since and "worker_start" not in stamps:
            # cancelled while it ran: its run is drawn from its start to its end
            stamps["worker_start"] = ended.running_since
    info = ended.info
    error = ended.error
    return ActionRecord(
        at=ended.at,
        source=source,
        invocation=info.tool_invocation_id,
        tool=f"{info.tool_name} {info.tool_version}".strip(),
        repository=info.repository,
        instance=ended.key.instance_name,
        target=info.target_id,
        mnemonic=info.action_mnemonic or ended.program,
        action=ended.key.action_digest.hash,
        worker=attempts.worker,
        exit_code=exit_code,
        error=error.code.name if error is not None else "",
        submitted_at=ended.queued_at,
        waited_for=tuple(sorted(ended.waited_for)),
        reserved_millicpus=attempts.millicpus,
        reserved_memory_bytes=attempts.memory_bytes,
        peak_rss_bytes=attempts.peak_rss_bytes,
        memory_source=attempts.memory_source,
        cpu_seconds=attempts.cpu_seconds,
        attempts=attempts.runs,
        kills=ended.kills,
        retries=ended.retries,
        freezes=attempts.freezes,
        stamps=stamps,
        killed_at=attempts.killed_at,
        kill_reason=attempts.kill_reason,
        kill_ended=attempts.kill_ended,
    )
