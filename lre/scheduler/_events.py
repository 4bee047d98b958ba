"""Events worth a line in the TUI's recent-events pane, as the scheduler sees them.

The scheduler calls its ``on_event`` hook (on the Trio thread, synchronously)
for ladder kills and escalations, failed operations, timeouts, unmatchable
actions and backpressure from a worker's precondition script. Successful
operations emit nothing, so the hook costs nothing on the hot path. The
kinds' values are those of ``lre.app.EventKind``, so the app can pass
``EventKind(event.kind)`` straight to its ``EventLog``.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from lre.errors import LreError
from lre.proto import re_pb2
from lre.scheduler._lease import Lease
from lre.scheduler._model import Backpressure, MemoryExceeded, RequestInfo
from lre.scheduler._records import OperationState
from lre.scheduler._units import memory_text

log = logging.getLogger(__name__)


class SchedulerEventKind(enum.StrEnum):
    KILL = "kill"  # killed for outgrowing its memory reservation
    ESCALATION = "escalation"  # requeued one ladder step up, or for a whole worker
    FAILURE = "failure"  # the operation ended with an error status
    TIMEOUT = "timeout"  # the action ran past its timeout
    UNMATCHABLE = "unmatchable"  # no worker can ever run it
    BACKPRESSURE = "backpressure"  # a worker's precondition script said no


@dataclass(frozen=True, slots=True)
class SchedulerEvent:
    """One event. ``summary`` names the action (mnemonic or program),
    ``worker`` the worker involved, ``peak_rss_bytes`` the peak the action
    reached when it is known (kills, finished runs)."""

    kind: SchedulerEventKind
    message: str
    peak_rss_bytes: int | None = None
    worker: str | None = None
    summary: str | None = None


EventHook = Callable[[SchedulerEvent], None]


def action_summary(info: RequestInfo, command: re_pb2.Command | None) -> str | None:
    """The client's mnemonic, else the program's base name, else None."""
    if info.action_mnemonic:
        return info.action_mnemonic
    if command is not None and command.arguments:
        return os.path.basename(command.arguments[0]) or None
    return None


def _summary(op: OperationState) -> str | None:
    return action_summary(op.request_info, op.command)


def failure_event(
    kind: SchedulerEventKind,
    op: OperationState,
    error: LreError,
    message: str,
    worker: str | None,
    peak_rss_bytes: int | None,
) -> SchedulerEvent:
    """An operation ended with ``error`` (FAILURE, TIMEOUT or UNMATCHABLE)."""
    text = f"{error.code.name}: {error.message}"
    if message and message != error.message:
        text = f"{text} ({message})"
    return SchedulerEvent(kind, text, peak_rss_bytes, worker, _summary(op))


def kill_event(op: OperationState, lease: Lease, outcome: MemoryExceeded) -> SchedulerEvent:
    """The worker killed ``lease`` for outgrowing its memory reservation."""
    held = "a whole worker" if lease.exclusive else memory_text(lease.reservation.memory_bytes)
    return SchedulerEvent(
        SchedulerEventKind.KILL,
        f"{op.name}: killed at {memory_text(outcome.peak_rss_bytes)} peak RSS, over its "
        f"reservation of {held} (ladder step {lease.ladder_step})",
        outcome.peak_rss_bytes,
        lease.worker_name,
        _summary(op),
    )


def escalation_event(op: OperationState, lease: Lease, outcome: MemoryExceeded) -> SchedulerEvent:
    """``op`` was requeued one ladder step up (or for a whole idle worker)."""
    if op.exclusive:
        target = "a whole idle worker"
    else:
        target = f"{memory_text(op.reservation.memory_bytes)} (ladder step {op.ladder_step})"
    return SchedulerEvent(
        SchedulerEventKind.ESCALATION,
        f"{op.name}: requeued to reserve {target} after {op.kills} kill(s)",
        outcome.peak_rss_bytes,
        lease.worker_name,
        _summary(op),
    )


def backpressure_event(op: OperationState, lease: Lease, outcome: Backpressure) -> SchedulerEvent:
    """The worker's precondition script declined ``lease``; ``op`` was requeued."""
    reason = f": {outcome.reason}" if outcome.reason else ""
    return SchedulerEvent(
        SchedulerEventKind.BACKPRESSURE,
        f"worker {lease.worker_name} declined {op.name}{reason}; requeued",
        None,
        lease.worker_name,
        _summary(op),
    )


def emit_event(hook: EventHook | None, event: SchedulerEvent) -> None:
    """Call ``hook`` with ``event``; an exception it raises is logged and ignored."""
    if hook is not None:
        try:
            hook(event)
        except Exception:
            log.exception("scheduler event hook failed for %s event", event.kind)
