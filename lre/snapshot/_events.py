"""The kinds of event lre reports, and one event as a snapshot carries it.

The scheduler tags what it reports with an ``EventKind``; the composition
root records those (and its own upstream events) in its event log, and every
``ProcessSnapshot`` carries the newest as ``RecentEvent`` rows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["EventKind", "RecentEvent"]


class EventKind(enum.StrEnum):
    """What the recent-events pane and ``lre_events_total{kind}`` distinguish.

    The values are what ``/api/v1/stats`` and ``/metrics`` show, so they never
    change once released.
    """

    KILL = "kill"  # killed by the memory control (requeued one ladder step up, or failed)
    FREEZE = "freeze"  # frozen by the memory control while memory is short
    THAW = "thaw"  # thawed by the memory control (memory freed, or it is the oldest)
    ESCALATION = "escalation"  # requeued at a higher ladder step / whole worker
    OOM = "oom"  # the kernel OOM killer struck before lre's kill line
    FAILURE = "failure"  # the operation ended with an error status
    TIMEOUT = "timeout"  # the action ran past its timeout
    UNMATCHABLE = "unmatchable"  # no worker can ever run it
    BACKPRESSURE = "backpressure"  # a worker's precondition script said no
    WORKER = "worker"  # a worker became unhealthy, recovered, or went away
    UPSTREAM = "upstream"  # a remote store or cluster became unreachable or came back


@dataclass(frozen=True, slots=True)
class RecentEvent:
    """One line of the recent-events pane. ``at`` is wall-clock (``time.time()``)."""

    at: float
    kind: EventKind
    message: str
    summary: str = ""  # mnemonic or command summary of the action, if any
    worker: str = ""
    peak_rss_bytes: int | None = None
    target: str = ""  # the client's target label of the action, if it sent one
