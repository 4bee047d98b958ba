"""MemoryStore keeps large-chunked uploads as their chunks; reads must not tell."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from hypothesis import given, settings
from hypothesis import strategies as st

from lre.cas import MemoryStore, read_blobs, read_bytes
from lre.digest import digest_of

CHUNK = 70 << 10
DATA = os.urandom(5 * CHUNK + 1234)


async def parts(chunks: list[bytes | memoryview | bytearray]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk  # type: ignore[misc]


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def stored(chunks: list[bytes | memoryview | bytearray]) -> MemoryStore:
    store = MemoryStore(1 << 30)
    await store.write(digest_of(DATA), parts(chunks))
    return store


@settings(max_examples=60, deadline=None)
@given(
    offset=st.integers(min_value=0, max_value=len(DATA)),
    limit=st.one_of(st.none(), st.integers(min_value=0, max_value=len(DATA) + 10)),
)
async def test_ranges_of_a_chunked_blob_match_slicing(offset: int, limit: int | None) -> None:
    views: list[bytes | memoryview | bytearray] = [memoryview(c) for c in split(DATA, CHUNK)]
    store = await stored(views)
    got = b"".join([c async for c in store.read(digest_of(DATA), offset, limit)])
    end = len(DATA) if limit is None else min(len(DATA), offset + limit)
    assert got == DATA[offset:end]
    assert all(len(c) <= 1 << 20 for c in [c async for c in store.read(digest_of(DATA))])


async def test_chunked_blob_reads_whole_and_in_batches() -> None:
    store = await stored(list(split(DATA, CHUNK)))
    digest = digest_of(DATA)
    assert await read_bytes(store, digest) == DATA
    assert await read_blobs(store, [digest]) == [DATA]
    assert store.statistics().stored_bytes == len(DATA)


async def test_mutable_chunks_are_copied() -> None:
    buffers = [bytearray(c) for c in split(DATA, CHUNK)]
    mixed: list[bytes | memoryview | bytearray] = [
        buffers[0],
        memoryview(buffers[1]),
        *buffers[2:],
    ]
    store = await stored(mixed)
    for buffer in buffers:
        buffer[:] = bytes(len(buffer))
    assert await read_bytes(store, digest_of(DATA)) == DATA
