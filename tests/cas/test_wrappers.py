"""VerifyStore and FastSlowStore behaviour beyond the shared protocol tests."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence
from pathlib import Path

import pytest
import trio

from lre.cas import (
    FastSlowActionCache,
    FastSlowStore,
    FilesystemStore,
    MemoryActionCache,
    MemoryStore,
    StoreCapabilities,
    VerifyStore,
    read_bytes,
)
from lre.cas._blob_io import write_bytes
from lre.digest import Digest, digest_of
from lre.errors import InvalidArgument, NotFound

from .conftest import chunked, pin


class TrustingStore:
    """A dict store that checks nothing: what an upstream store might do."""

    def __init__(self) -> None:
        self.blobs: dict[Digest, bytes] = {}
        self.reads = 0

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]:
        await trio.lowlevel.checkpoint()
        return [d.size_bytes if d in self.blobs else None for d in digests]

    async def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        await trio.lowlevel.checkpoint()
        if digest not in self.blobs:
            raise NotFound(f"blob {digest} is not in the CAS")
        self.reads += 1
        end = None if limit is None else offset + limit
        yield self.blobs[digest][offset:end]

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None:
        self.blobs[digest] = b"".join([c async for c in chunks])

    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities()


@pytest.mark.parametrize(
    ("verify_size", "verify_hash"), [(True, True), (True, False), (False, True)]
)
async def test_verify_store_rejects_what_it_checks(verify_size: bool, verify_hash: bool) -> None:
    inner = TrustingStore()
    store = VerifyStore(inner, verify_size=verify_size, verify_hash=verify_hash)
    digest = digest_of(b"right")
    wrong_hash = b"wrong"
    wrong_size = b"right!"
    if verify_hash:
        with pytest.raises(InvalidArgument, match="hashes to"):
            await store.write(digest, chunked(wrong_hash))
    if verify_size:
        with pytest.raises(InvalidArgument, match="more than the expected"):
            await store.write(digest, chunked(wrong_size))
    assert inner.blobs == {} or not (verify_size and verify_hash)
    await store.write(digest, chunked(b"right"))
    assert await read_bytes(store, digest) == b"right"


async def test_verify_store_never_lets_a_mismatch_through() -> None:
    inner = TrustingStore()
    store = VerifyStore(inner)
    digest = digest_of(b"right")
    for sent in (b"wrong", b"righ", b"right!"):
        with pytest.raises(InvalidArgument):
            await store.write(digest, chunked(sent))
    assert inner.blobs == {}


async def make_tiers(
    tmp_path: Path, fast_bytes: int = 1 << 20
) -> tuple[MemoryStore, FilesystemStore]:
    slow = FilesystemStore(tmp_path / "slow", tmp_path / "tmp", 1 << 30)
    await slow.open()
    return MemoryStore(fast_bytes), slow


async def test_fast_slow_reads_through_and_fills_fast(tmp_path: Path) -> None:
    fast, slow = await make_tiers(tmp_path)
    store = FastSlowStore(fast, slow)
    digest = await write_bytes(slow, b"only upstream")
    absent = digest_of(b"nowhere")
    assert await fast.has_many([digest]) == [None]
    assert await store.has_many([digest, absent]) == [13, None]
    assert b"".join([c async for c in store.read(digest, 5, 3)]) == b"ups"
    assert await fast.has_many([digest]) == [13]
    with pytest.raises(NotFound):
        await read_bytes(store, absent)


async def test_fast_slow_streams_from_slow_when_fast_is_too_small(tmp_path: Path) -> None:
    fast, slow = await make_tiers(tmp_path, fast_bytes=10)
    store = FastSlowStore(fast, slow)
    digest = await write_bytes(slow, b"too big for the fast tier")
    assert await read_bytes(store, digest) == b"too big for the fast tier"
    assert await fast.has_many([digest]) == [None]


@pytest.mark.parametrize("policy", ["both", "fast_only"])
async def test_fast_slow_write_policy(tmp_path: Path, policy: str) -> None:
    fast, slow = await make_tiers(tmp_path)
    store = FastSlowStore(fast, slow, write_policy=policy)  # type: ignore[arg-type]
    digest = await write_bytes(store, b"new output")
    assert await fast.has_many([digest]) == [10]
    assert await slow.has_many([digest]) == ([10] if policy == "both" else [None])
    with pytest.raises(InvalidArgument):
        await store.write(digest_of(b"x"), chunked(b"y"))
    assert await slow.has_many([digest_of(b"x")]) == [None]


async def test_fast_slow_pins_the_fast_tier(tmp_path: Path) -> None:
    fast, slow = await make_tiers(tmp_path, fast_bytes=100)
    store = FastSlowStore(fast, slow, write_policy="fast_only")
    digest = await write_bytes(store, b"a" * 60)
    with pin(store, [digest]):
        await write_bytes(slow, b"b" * 60)
        # Reading b needs room in fast, but a is pinned: b is streamed from slow.
        assert await read_bytes(store, digest_of(b"b" * 60)) == b"b" * 60
        assert await fast.has_many([digest]) == [60]


def test_both_tiered_wrappers_refuse_an_unknown_write_policy() -> None:
    with pytest.raises(ValueError, match="write_policy: 'slow_only' is not"):
        FastSlowStore(MemoryStore(1 << 20), MemoryStore(1 << 20), write_policy="slow_only")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="write_policy: 'slow_only' is not"):
        FastSlowActionCache(
            MemoryActionCache(),
            MemoryActionCache(),
            write_policy="slow_only",  # type: ignore[arg-type]
        )
