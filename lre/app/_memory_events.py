"""Freezes and thaws of the memory control as lines of the events pane.

A local worker's ``MemoryControl`` tells each freeze and thaw as a
``lre.worker.MemoryAction`` keyed by lease id; ``MemoryEventRecorder`` names
the action by its mnemonic and target (looked up among the scheduler's
running leases) and adds a ``freeze`` or ``thaw`` event to the app's
``EventLog``, so the TUI, ``/api/v1/stats`` and ``lre_events_total{kind}``
show them. Kills need nothing here: they reach the event log from the
scheduler (``kill``, then ``escalation`` or ``failure``).

A lease the scheduler no longer lists (it ended meanwhile) is named by its
lease id; nothing here raises.
"""

from __future__ import annotations

from collections.abc import Callable

from lre.app._events import EventLog
from lre.scheduler import SchedulerStatistics, memory_text
from lre.snapshot import EventKind, RecentEvent
from lre.worker import MemoryAction

__all__ = ["MemoryEventRecorder"]


class MemoryEventRecorder:
    """The ``on_event`` hook of one worker's memory control (``worker``: its
    name; ``statistics``: the statistics of the scheduler it takes leases from)."""

    def __init__(
        self, events: EventLog, worker: str, statistics: Callable[[], SchedulerStatistics]
    ) -> None:
        self._events = events
        self._worker = worker
        self._statistics = statistics

    def __call__(self, action: MemoryAction) -> RecentEvent:
        summary, target = self._names(action.action_id)
        label = " ".join(p for p in (summary, target) if p) or f"lease {action.action_id}"
        rss = memory_text(action.rss_bytes)
        reserved = memory_text(action.reserved_bytes)
        if action.kind == "freeze":
            kind = EventKind.FREEZE
            message = (
                f"{label}: frozen ({action.method}) at {rss} RSS, reserving {reserved}: "
                f"{action.reason}"
            )
        else:
            kind = EventKind.THAW
            message = (
                f"{label}: thawed after {action.frozen_seconds:.1f} s frozen, at {rss} RSS, "
                f"reserving {reserved}: {action.reason}"
            )
        return self._events.add(kind, message, summary=summary, worker=self._worker, target=target)

    def _names(self, lease_id: str) -> tuple[str, str]:
        """(mnemonic or program, target) of the running lease; ("", "") if gone."""
        for worker in self._statistics().workers:
            if worker.name != self._worker:
                continue
            for lease in worker.leases:
                if lease.lease_id == lease_id:
                    return lease.summary, lease.target_id
        return "", ""
