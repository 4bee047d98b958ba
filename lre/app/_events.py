"""The recent-events ring the TUI's events pane and ``lre_events_total`` read.

The composition root owns one ``EventLog`` and calls ``add`` on the Trio
thread whenever something worth a line happens (a memory kill, a ladder
escalation, a freeze or thaw by the memory control, an OOM kill, a failure,
...); ``SnapshotAssembler`` copies it into every ``ProcessSnapshot``. The
kinds and the row type are ``lre.snapshot``'s ``EventKind`` and ``RecentEvent``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType

from lre.snapshot import EventKind, RecentEvent

__all__ = ["EventLog"]


class EventLog:
    """A bounded ring of recent events plus a total per kind (never reset).

    The app calls ``add`` from the Trio thread whenever something worth a
    line happens; the oldest event is dropped once ``capacity`` are held.
    """

    def __init__(self, capacity: int = 200, *, clock: Callable[[], float] = time.time) -> None:
        if capacity < 1:
            raise ValueError(f"EventLog capacity must be >= 1, got {capacity}")
        self._events: deque[RecentEvent] = deque(maxlen=capacity)
        self._totals: dict[EventKind, int] = dict.fromkeys(EventKind, 0)
        self._clock = clock

    def add(
        self,
        kind: EventKind,
        message: str,
        *,
        summary: str = "",
        worker: str = "",
        peak_rss_bytes: int | None = None,
        target: str = "",
    ) -> RecentEvent:
        event = RecentEvent(
            self._clock(), kind, message, summary, worker, peak_rss_bytes, target=target
        )
        self._events.append(event)
        self._totals[kind] += 1
        return event

    def recent(self, limit: int | None = None) -> tuple[RecentEvent, ...]:
        """The newest ``limit`` events (all held when None), newest first."""
        events = tuple(reversed(self._events))
        return events if limit is None else events[:limit]

    def totals(self) -> Mapping[str, int]:
        return MappingProxyType({kind.value: n for kind, n in self._totals.items()})
