"""Nurseries whose failures end one action with one status.

A Trio nursery reports its children's failures as an exception group; an
action's status can carry one error only, and a group that reached the
worker's own nursery would stop lre. ``single_error_nursery`` raises the
first failure alone (an ``LreError`` preferred, as it says what the client
should see), and lets a group holding a cancellation through untouched,
because Trio's cancel scopes must see their own ``Cancelled``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from lre.errors import LreError


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf error of ``group`` (depth first), an ``LreError`` if any."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        current = pending.pop(0)
        if isinstance(current, BaseExceptionGroup):
            pending[0:0] = current.exceptions
        else:
            leaves.append(current)
    return next((e for e in leaves if isinstance(e, LreError)), leaves[0])


@asynccontextmanager
async def single_error_nursery() -> AsyncIterator[trio.Nursery]:
    """``trio.open_nursery()``, raising its first failure alone (see the
    module docstring)."""
    try:
        async with trio.open_nursery() as nursery:
            yield nursery
    except BaseExceptionGroup as group:
        if group.subgroup(trio.Cancelled) is not None:
            raise
        raise first_error(group) from None
