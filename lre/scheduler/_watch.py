"""``OperationWatch``: a client's view of one operation's updates.

``Scheduler.watch`` hands these out (``ForwardScheduler.watch`` is the
scheduler's it wraps). Watchers are counted with ``attach_watcher`` /
``detach_watcher``: an operation nobody watches any more is cancelled, at
once or after a grace period (the scheduler's ``Operations.detach``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Protocol

import trio

from lre.scheduler._model import OperationSnapshot
from lre.scheduler._records import OperationState


class Watched(Protocol):
    """The watcher bookkeeping of an operation record."""

    watchers: int
    #: Bumped whenever watchers come or go, so a pending abandon can tell
    #: that a client came back in between.
    abandon_token: int

    @property
    def done(self) -> bool: ...


def attach_watcher(op: Watched) -> None:
    """Count one more watcher of ``op`` (and void any pending abandon)."""
    op.watchers += 1
    op.abandon_token += 1


def detach_watcher(
    op: Watched, grace_s: float, nursery: trio.Nursery | None, cancel: Callable[[], None]
) -> None:
    """Count one watcher less; when none is left and ``op`` is not done, call
    ``cancel`` at once (``grace_s`` <= 0 or no ``nursery``) or after
    ``grace_s`` seconds in ``nursery``, unless a watcher came back or the
    operation finished meanwhile."""
    op.watchers -= 1
    if op.watchers > 0 or op.done:
        return
    op.abandon_token += 1
    if grace_s <= 0 or nursery is None:
        cancel()
        return
    token = op.abandon_token

    async def abandon_later() -> None:
        await trio.sleep(grace_s)
        if op.abandon_token == token and op.watchers == 0 and not op.done:
            cancel()

    nursery.start_soon(abandon_later)


class OperationWatch:
    """Updates of one operation, as an async context manager and iterator::

        async with scheduler.watch(name) as updates:
            async for snapshot in updates:
                ...

    The first iteration yields the current state at once; later ones yield
    after every change, and at least every progress interval while the
    operation waits or runs (the same state again): the scheduler wakes every
    unfinished operation's watchers on a tick of its own, so a watch has no
    timer. Iteration ends after the snapshot with ``done``. Leaving the
    ``async with`` calls ``detach`` (when the last watcher of an unfinished
    operation leaves, the scheduler cancels it after its ``detach_grace_s``).
    Iterating outside the ``async with`` raises ``RuntimeError``.
    """

    __slots__ = ("_detach", "_entered", "_event", "_finished", "_first", "_op")

    def __init__(self, op: OperationState, detach: Callable[[], None]) -> None:
        self._op = op
        self._detach = detach
        self._first = True
        self._finished = False
        self._entered = False
        self._event = op.changed

    async def __aenter__(self) -> OperationWatch:
        attach_watcher(self._op)
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
            self._detach()

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
            await self._event.wait()  # woken by a change or by the scheduler's tick
        op = self._op
        self._event = op.changed
        snapshot = op.snapshot()
        if snapshot.done:
            self._finished = True
        return snapshot
