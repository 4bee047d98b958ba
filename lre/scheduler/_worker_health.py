"""Whether each worker is healthy, judged from the outcomes it reports.

A worker whose actions fail for lre's reasons (``InfrastructureFailure``:
inputs could not be staged, the work directory is full, the worker is
shutting down an action it holds) ``UNHEALTHY_AFTER`` times in a row is
reported unhealthy with the last error; the next outcome that is not such a
failure (a result, a memory kill) reports it recovered. A worker that is
unregistered while it still holds leases went away. Each of these is one
``WORKER`` event, which the app turns into a health problem (``/status``
answers 503) or clears. Backpressure changes nothing. Pure: no I/O.
"""

from __future__ import annotations

from lre.scheduler._events import SchedulerEvent
from lre.scheduler._model import Backpressure, InfrastructureFailure, Outcome
from lre.snapshot import EventKind

#: Consecutive infrastructure failures after which a worker is unhealthy.
UNHEALTHY_AFTER = 3


class WorkerHealth:
    """Per-worker streaks of infrastructure failures; see the module docstring."""

    def __init__(self, unhealthy_after: int = UNHEALTHY_AFTER) -> None:
        self.unhealthy_after = unhealthy_after
        self._streaks: dict[str, int] = {}

    def observe(self, worker: str, outcome: Outcome) -> SchedulerEvent | None:
        """Count ``outcome`` of ``worker``; the event when its health changes."""
        if isinstance(outcome, Backpressure):
            return None
        streak = self._streaks.get(worker, 0)
        if isinstance(outcome, InfrastructureFailure):
            self._streaks[worker] = streak + 1
            if streak + 1 == self.unhealthy_after:
                return SchedulerEvent(
                    EventKind.WORKER,
                    f"worker {worker}: {streak + 1} actions in a row failed for lre's reasons; "
                    f"last: {outcome.error.code.name}: {outcome.error.message}",
                    worker=worker,
                    healthy=False,
                )
            return None
        self._streaks[worker] = 0
        if streak >= self.unhealthy_after:
            return SchedulerEvent(
                EventKind.WORKER,
                f"worker {worker}: running actions again after {streak} failure(s)",
                worker=worker,
                healthy=True,
            )
        return None

    def went_away(self, worker: str, held_leases: int) -> SchedulerEvent | None:
        """``worker`` was unregistered; an event when it still held leases."""
        self._streaks.pop(worker, None)
        if held_leases == 0:
            return None
        return SchedulerEvent(
            EventKind.WORKER,
            f"worker {worker} went away while running {held_leases} action(s); they were requeued",
            worker=worker,
            healthy=False,
        )
