"""Closing async iterators deterministically (Trio forbids leaving it to the GC)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

T = TypeVar("T")


@asynccontextmanager
async def closing(iterator: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Yield ``iterator`` and call its ``aclose()`` (if it has one) on exit."""
    try:
        yield iterator
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
