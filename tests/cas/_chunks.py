"""A chunk source for store writes, shared by the store tests of every folder."""

from __future__ import annotations

from collections.abc import AsyncIterator


async def chunked(data: bytes, size: int = 3) -> AsyncIterator[bytes]:
    """Yield ``data`` in chunks of ``size`` bytes (an async chunk source)."""
    for start in range(0, len(data), size):
        yield data[start : start + size]
