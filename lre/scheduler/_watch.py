"""``OperationWatch``: a client's view of one operation's updates."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

import trio

from lre.scheduler._model import OperationSnapshot
from lre.scheduler._records import OperationState

if TYPE_CHECKING:
    from lre.scheduler._scheduler import Scheduler


class OperationWatch:
    """Updates of one operation, as an async context manager and iterator::

        async with scheduler.watch(name) as updates:
            async for snapshot in updates:
                ...

    The first iteration yields the current state at once; later ones yield
    after every change, and at least every ``progress_interval_s`` while the
    operation waits or runs (the same state again). Iteration ends after the
    snapshot with ``done``. Leaving the ``async with`` detaches the watcher;
    when the last watcher of an unfinished operation leaves, the operation is
    cancelled after the scheduler's ``detach_grace_s``. Iterating outside
    the ``async with`` raises ``RuntimeError``.
    """

    __slots__ = ("_entered", "_event", "_finished", "_first", "_op", "_scheduler")

    def __init__(self, scheduler: Scheduler, op: OperationState) -> None:
        self._scheduler = scheduler
        self._op = op
        self._first = True
        self._finished = False
        self._entered = False
        self._event = op.changed

    async def __aenter__(self) -> OperationWatch:
        self._scheduler._attach(self._op)
        self._entered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._entered:
            self._entered = False
            self._scheduler._detach(self._op)

    def __aiter__(self) -> OperationWatch:
        return self

    async def __anext__(self) -> OperationSnapshot:
        if not self._entered:
            raise RuntimeError("iterate an OperationWatch inside 'async with'")
        if self._finished:
            raise StopAsyncIteration
        if self._first:
            self._first = False
            await trio.lowlevel.checkpoint()
        else:
            # Woken by a change, or by the scheduler's progress tick (every
            # progress_interval_s for every unfinished operation): no timer per
            # watcher.
            await self._event.wait()
        op = self._op
        self._event = op.changed
        snapshot = op.snapshot()
        if snapshot.done:
            self._finished = True
        return snapshot
