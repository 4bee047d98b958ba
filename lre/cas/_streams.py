"""Closing a chunk stream when its consumer stops early."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import TypeVar

S = TypeVar("S", bound=AsyncIterable[bytes])


@contextlib.asynccontextmanager
async def closing_stream(stream: S) -> AsyncIterator[S]:
    """``async with closing_stream(store.read(d)) as chunks:`` closes the
    stream (releasing its file) on exit, also when the consumer breaks out,
    fails or is cancelled. Streams without ``aclose`` are left alone.

    Stores use it on the ``chunks`` given to ``write`` too: a write that
    fails part-way closes its source.
    """
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
