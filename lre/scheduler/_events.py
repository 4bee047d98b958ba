"""Events worth a line in the TUI's recent-events pane, as the scheduler sees them.

The scheduler calls its ``on_event`` hook (on the Trio thread, synchronously)
for ladder kills and escalations, failed operations, timeouts, unmatchable
actions and backpressure from a worker's precondition script. Successful
operations emit nothing, so the hook costs nothing on the hot path. Events
are tagged with ``lre.snapshot.EventKind``, the one set of kinds the app's
event log, the dashboard and ``/metrics`` use too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from lre.errors import LreError
from lre.scheduler._lease import Lease
from lre.scheduler._model import Backpressure, MemoryExceeded
from lre.scheduler._records import OperationState
from lre.scheduler._units import memory_text
from lre.snapshot import EventKind, action_summary

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SchedulerEvent:
    """One event. ``summary`` names the action (mnemonic or program),
    ``worker`` the worker involved, ``peak_rss_bytes`` the peak the action
    reached when it is known (kills, finished runs). ``healthy`` is set on
    ``WORKER`` events: False when the worker became unhealthy or went away,
    True when it recovered."""

    kind: EventKind
    message: str
    peak_rss_bytes: int | None = None
    worker: str | None = None
    summary: str | None = None
    healthy: bool | None = None
    target: str = ""


EventHook = Callable[[SchedulerEvent], None]


def _summary(op: OperationState) -> str | None:
    """``op``'s action by ``action_summary``; None when it names nothing."""
    arguments = op.command.arguments if op.command is not None else ()
    return action_summary(op.request_info.action_mnemonic, arguments) or None


def failure_event(
    kind: EventKind,
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
    return SchedulerEvent(
        kind, text, peak_rss_bytes, worker, _summary(op), target=op.request_info.target_id
    )


def exit_event(
    op: OperationState, exit_code: int, worker: str | None, peak_rss_bytes: int | None
) -> SchedulerEvent:
    """``op``'s command exited with ``exit_code`` (not 0): a compile or test
    that failed, named by its target and mnemonic."""
    return SchedulerEvent(
        EventKind.FAILURE,
        f"{action_label(op)}: exited with code {exit_code}",
        peak_rss_bytes,
        worker,
        _summary(op),
        target=op.request_info.target_id,
    )


def _held(lease: Lease) -> str:
    """What ``lease`` reserved, in words."""
    return "a whole worker" if lease.exclusive else memory_text(lease.reservation.memory_bytes)


def _next_reservation(op: OperationState) -> str:
    """What ``op`` reserves on its next run, in words."""
    return "a whole idle worker" if op.exclusive else memory_text(op.reservation.memory_bytes)


def kill_event(op: OperationState, lease: Lease, outcome: MemoryExceeded) -> SchedulerEvent:
    """The worker's memory control killed ``lease`` (memory short, or the ceiling)."""
    held = _held(lease)
    return SchedulerEvent(
        EventKind.KILL,
        f"{action_label(op)}: killed at {memory_text(outcome.peak_rss_bytes)} peak RSS"
        f"{_why(outcome)}, reserving {held} (ladder step {lease.ladder_step})",
        outcome.peak_rss_bytes,
        lease.worker_name,
        _summary(op),
        target=op.request_info.target_id,
    )


def escalation_event(op: OperationState, lease: Lease, outcome: MemoryExceeded) -> SchedulerEvent:
    """``op`` was requeued one ladder step up (or for a whole idle worker)."""
    target = _next_reservation(op)
    if not op.exclusive:
        target = f"{target} (ladder step {op.ladder_step})"
    return SchedulerEvent(
        EventKind.ESCALATION,
        f"{action_label(op)}: requeued to reserve {target} after {op.kills} kill(s)",
        outcome.peak_rss_bytes,
        lease.worker_name,
        _summary(op),
        target=op.request_info.target_id,
    )


def gave_up_event(op: OperationState, lease: Lease, outcome: MemoryExceeded) -> SchedulerEvent:
    """lre killed ``lease`` for its memory for the last time: ``op`` ended
    with the killed run's result (exit code 137), not run again."""
    return SchedulerEvent(
        EventKind.FAILURE,
        f"{action_label(op)}: failed with exit code 137 after {op.kills} kill(s) for its "
        f"memory, peak {memory_text(outcome.peak_rss_bytes)}{_why(outcome)}; not run again, "
        "the reason is at the end of its stderr",
        outcome.peak_rss_bytes,
        lease.worker_name,
        _summary(op),
        target=op.request_info.target_id,
    )


def backpressure_event(op: OperationState, lease: Lease, outcome: Backpressure) -> SchedulerEvent:
    """The worker's precondition script declined ``lease``; ``op`` was requeued."""
    reason = f": {outcome.reason}" if outcome.reason else ""
    return SchedulerEvent(
        EventKind.BACKPRESSURE,
        f"worker {lease.worker_name} declined {action_label(op)}{reason}; requeued",
        None,
        lease.worker_name,
        _summary(op),
        target=op.request_info.target_id,
    )


def _why(outcome: MemoryExceeded) -> str:
    return f" ({outcome.reason})" if outcome.reason else ""


def action_label(op: OperationState) -> str:
    """How a log line names ``op``'s action: mnemonic (or program) and target,
    e.g. ``CppCompile //pkg:lib``; the operation name when neither is known."""
    parts = [p for p in (_summary(op), op.request_info.target_id) if p]
    return " ".join(parts) or op.name


def memory_kill_text(
    op: OperationState, lease: Lease, outcome: MemoryExceeded, error: LreError | None
) -> str:
    """One log line for a memory-ladder kill of ``lease`` and what follows it.

    Call after ``escalate``: ``op`` then holds the new step, and ``error``
    is the RESOURCE_EXHAUSTED the operation ends with (None when requeued).
    Sizes are in binary units (``661 MiB``), never raw bytes.
    """
    held = _held(lease)
    text = (
        f"memory ladder: {action_label(op)} ({op.name}) killed on worker {lease.worker_name} "
        f"at {memory_text(outcome.peak_rss_bytes)} peak RSS{_why(outcome)}, reserving {held} "
        f"(ladder step {lease.ladder_step}); "
    )
    if error is not None:
        ends = (
            "exit code 137 (the killed run's result)"
            if outcome.result is not None
            else error.code.name
        )
        return text + (
            f"not retried: failed with {ends} after {op.kills} kill(s), "
            f"reservations tried: {', '.join(op.steps_tried)}"
        )
    target = _next_reservation(op)
    return text + f"requeued at ladder step {op.ladder_step} reserving {target} (kill {op.kills})"


def oom_event(op: OperationState, lease: Lease, peak_rss_bytes: int | None) -> SchedulerEvent:
    """The kernel's OOM killer killed ``lease``'s action (lre had not)."""
    held = _held(lease)
    peak = "unknown" if peak_rss_bytes is None else memory_text(peak_rss_bytes)
    return SchedulerEvent(
        EventKind.OOM,
        f"{action_label(op)} ({op.name}): killed by the kernel's OOM killer on worker "
        f"{lease.worker_name} at {peak} peak RSS with a reservation of {held} "
        f"(ladder step {lease.ladder_step}); the host ran out of memory before lre's "
        "kill line was reached",
        peak_rss_bytes,
        lease.worker_name,
        _summary(op),
        target=op.request_info.target_id,
    )


def emit_event(hook: EventHook | None, event: SchedulerEvent) -> None:
    """Call ``hook`` with ``event``; an exception it raises is logged and ignored."""
    if hook is not None:
        try:
            hook(event)
        except Exception:
            log.exception("scheduler event hook failed for %s event", event.kind)
