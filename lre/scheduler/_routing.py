"""Routing: a scheduler that wraps ``Scheduler`` decides where an operation runs.

A wrapping scheduler (``ForwardScheduler``) submits to the scheduler it wraps
with a ``route``. Before the cache check, ``Scheduler`` awaits
``route(RoutedOperation)`` in the operation's own task. The route either
returns without taking the operation away (it then runs here like any other:
cache check, input check, queue, a local worker), or calls ``take_away``,
reports stages with ``set_stage`` and ends it with ``finish``. Either way the
operation has one record, in the wrapped scheduler's registry: its name,
watchers, cancellation, dedup and retention are that scheduler's, so the
wrapper keeps no operations of its own.

An operation taken away is not in the local statistics' stage counts or
completions, raises no scheduler events and writes no history record (its
worker is elsewhere; the wrapper counts it). When it ends for any reason
(``finish``, CancelOperation, no watcher left, shutdown) the route is
cancelled. A route that returns with the operation still away and unfinished
ends it with INTERNAL; one that raises ends it with the error it raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from lre.errors import Internal, LreError
from lre.proto import re_pb2
from lre.scheduler._model import ActionKey, Stage
from lre.scheduler._operations import Operations
from lre.scheduler._records import OperationState


class RoutedOperation:
    """A route's handle on the operation it routes (see the module docstring)."""

    __slots__ = ("_op", "_owner")

    def __init__(self, owner: Operations, op: OperationState) -> None:
        self._owner = owner
        self._op = op

    @property
    def name(self) -> str:
        return self._op.name

    @property
    def key(self) -> ActionKey:
        return self._op.key

    @property
    def stage(self) -> Stage:
        return self._op.stage

    @property
    def done(self) -> bool:
        return self._op.done

    def take_away(self, message: str) -> None:
        """The operation runs elsewhere from now on; clients see ``message``
        (why and where) until it ends. Nothing once it ended."""
        op = self._op
        if not op.done and not op.away:
            self._owner.take_away(op, message)
            op.notify()

    def set_stage(self, stage: Stage) -> None:
        """The stage reported from elsewhere (COMPLETED is ignored: ``finish`` ends it)."""
        op = self._op
        if op.away and not op.done and stage is not Stage.COMPLETED and stage != op.stage:
            self._owner.set_stage(op, stage)
            op.notify()

    def bring_back(self) -> None:
        """Run here after all (elsewhere could not or would not): the operation
        goes back to CACHE_CHECK and, once the route returns, takes the local path."""
        op = self._op
        if op.away and not op.done:
            self._owner.bring_back(op)
            op.notify()

    def finish(
        self,
        *,
        result: re_pb2.ActionResult | None = None,
        cached: bool = False,
        error: LreError | None = None,
        message: str = "",
    ) -> None:
        """End the operation (nothing if it already ended); ``message`` empty
        keeps the one given to ``take_away``."""
        op = self._op
        self._owner.complete(
            op, result=result, cached=cached, error=error, message=message or op.message
        )


#: What a wrapping scheduler passes to ``Scheduler.submit``.
Route = Callable[[RoutedOperation], Awaitable[None]]


async def run_route(owner: Operations, op: OperationState, route: Route) -> None:
    """Await ``route`` for ``op`` under a scope that ``op``'s end cancels;
    INTERNAL when it returns with ``op`` away and unfinished."""
    with trio.CancelScope() as scope:
        op.route_scope = scope
        try:
            await route(RoutedOperation(owner, op))
        finally:
            op.route_scope = None
    if op.away and not op.done:
        owner.complete(
            op, error=Internal(f"operation {op.name}: its route ended without an outcome")
        )
