"""Shared fixtures for the store tests: one factory per store kind."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import pytest

from lre.cas import BlobStore, FastSlowStore, FilesystemStore, MemoryStore, Pin, VerifyStore
from lre.digest import Digest
from tests.cas._chunks import chunked

__all__ = ["StoreFactory", "chunked", "pin"]

StoreFactory = Callable[[int], Awaitable[BlobStore]]

BOUNDED_KINDS = ["memory", "filesystem"]
STORE_KINDS = [*BOUNDED_KINDS, "verify", "fast_slow"]


def pin(store: BlobStore, digests: Iterable[Digest]) -> Pin:
    """Pin ``digests`` through the ``pin`` the store offers (fails if none)."""
    pinner = store.capabilities().pin
    assert pinner is not None, f"{type(store).__name__} offers no pin"
    return pinner(digests)


async def build_store(kind: str, tmp_path: Path, max_bytes: int) -> BlobStore:
    if kind == "memory":
        return MemoryStore(max_bytes)
    if kind == "filesystem":
        store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", max_bytes)
        await store.open()
        return store
    if kind == "verify":
        return VerifyStore(MemoryStore(max_bytes))
    if kind == "fast_slow":
        slow = FilesystemStore(tmp_path / "slow", tmp_path / "tmp", 1 << 30)
        await slow.open()
        return FastSlowStore(MemoryStore(max_bytes), slow)
    raise AssertionError(kind)


@pytest.fixture(params=STORE_KINDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A factory building a fresh store of the parametrized kind."""

    async def factory(max_bytes: int = 1 << 30) -> BlobStore:
        return await build_store(request.param, tmp_path, max_bytes)

    return factory


@pytest.fixture(params=BOUNDED_KINDS)
def make_bounded_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Like ``make_store``, for the stores that evict themselves."""

    async def factory(max_bytes: int = 1 << 30) -> BlobStore:
        return await build_store(request.param, tmp_path, max_bytes)

    return factory
