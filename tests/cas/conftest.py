"""Shared fixtures for the store tests: one factory per store kind."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from lre.cas import BlobStore, FilesystemStore, MemoryStore

StoreFactory = Callable[[int], Awaitable[BlobStore]]

STORE_KINDS = ["memory", "filesystem"]


async def chunked(data: bytes, size: int = 3) -> AsyncIterator[bytes]:
    """Yield ``data`` in chunks of ``size`` bytes (an async chunk source)."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.fixture(params=STORE_KINDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A factory building a fresh store of the parametrized kind."""
    kind = request.param

    async def factory(max_bytes: int = 1 << 30) -> BlobStore:
        if kind == "memory":
            return MemoryStore(max_bytes)
        if kind == "filesystem":
            store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", max_bytes)
            await store.open()
            return store
        raise AssertionError(kind)

    return factory
