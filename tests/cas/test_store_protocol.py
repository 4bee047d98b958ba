"""BlobStore behaviour every store must show (parametrized over store kinds)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lre.cas import BlobStore, MemoryStore, closing_stream, read_bytes
from lre.cas._blob_io import missing_digests, write_bytes
from lre.digest import EMPTY_DIGEST, Digest, digest_of
from lre.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted

from .conftest import StoreFactory, chunked, pin


async def read_range(store: BlobStore, digest: Digest, offset: int, limit: int | None) -> bytes:
    async with closing_stream(store.read(digest, offset, limit)) as chunks:
        return b"".join([c async for c in chunks])


async def test_round_trip_and_has_many(make_store: StoreFactory) -> None:
    store = await make_store()
    data = b"hello lre" * 100
    digest = await write_bytes(store, data)
    absent = digest_of(b"absent")
    assert await store.has_many([digest, absent, EMPTY_DIGEST]) == [len(data), None, 0]
    assert await read_bytes(store, digest) == data
    # The same hash with a wrong size is not the same blob.
    assert await store.has_many([Digest(digest.hash, digest.size_bytes + 1)]) == [None]
    assert await missing_digests(store, [absent, digest, absent]) == [absent]


async def test_empty_blob_always_present(make_store: StoreFactory) -> None:
    store = await make_store()
    assert await store.has_many([EMPTY_DIGEST]) == [0]
    assert await read_bytes(store, EMPTY_DIGEST) == b""
    await store.write(EMPTY_DIGEST, chunked(b""))
    assert await read_range(store, EMPTY_DIGEST, 0, None) == b""


async def test_offsets_and_limits(make_store: StoreFactory) -> None:
    store = await make_store()
    data = bytes(range(256)) * 5
    digest = await write_bytes(store, data)
    assert await read_range(store, digest, 10, None) == data[10:]
    assert await read_range(store, digest, 10, 20) == data[10:30]
    assert await read_range(store, digest, 0, 0) == b""
    assert await read_range(store, digest, len(data), None) == b""
    assert await read_range(store, digest, len(data) - 1, 100) == data[-1:]
    with pytest.raises(OutOfRange, match="negative"):
        await read_range(store, digest, -1, None)
    with pytest.raises(OutOfRange, match="past its size"):
        await read_range(store, digest, len(data) + 1, None)
    with pytest.raises(InvalidArgument, match="limit -1"):
        await read_range(store, digest, 0, -1)


async def test_read_absent_is_not_found(make_store: StoreFactory) -> None:
    store = await make_store()
    absent = digest_of(b"nope")
    with pytest.raises(NotFound, match=absent.hash):
        await read_bytes(store, absent)


@pytest.mark.parametrize(
    ("sent", "match"),
    [
        (b"hello!", "at least 6"),
        (b"hell", "received 4 bytes, expected 5"),
        (b"jello", "hashes to"),
        (b"hello world, far too long", "more than the expected 5 bytes"),
    ],
)
async def test_mismatch_leaves_nothing(make_store: StoreFactory, sent: bytes, match: str) -> None:
    store = await make_store()
    digest = digest_of(b"hello")
    with pytest.raises(InvalidArgument, match=match) as info:
        await store.write(digest, chunked(sent))
    assert str(digest) in info.value.message
    assert await store.has_many([digest]) == [None]
    with pytest.raises(NotFound):
        await read_bytes(store, digest)


async def test_rewrite_of_present_blob_is_fine(make_store: StoreFactory) -> None:
    store = await make_store()
    digest = await write_bytes(store, b"twice")
    assert await write_bytes(store, b"twice") == digest
    assert await read_bytes(store, digest) == b"twice"


async def test_eviction_keeps_pinned_and_recent(make_bounded_store: StoreFactory) -> None:
    store = await make_bounded_store(1000)
    blobs = [bytes([i]) * 300 for i in range(3)]
    digests = [await write_bytes(store, b) for b in blobs]
    held = pin(store, [digests[0]])
    await store.has_many([digests[1]])  # a use: digests[2] is now the oldest unpinned
    await write_bytes(store, b"\x09" * 300)
    assert await store.has_many(digests) == [300, 300, None]
    # Everything else pinned: a write that cannot fit fails and stores nothing.
    with pin(store, digests[1:2]):
        big = b"\x0a" * 500
        with pytest.raises(ResourceExhausted, match="full"):
            await write_bytes(store, big)
        assert await store.has_many([digest_of(big)]) == [None]
    held.release()
    held.release()  # idempotent
    await write_bytes(store, b"\x0b" * 600)
    assert (await store.has_many(digests[:1])) == [None]


async def test_blob_larger_than_store_is_refused(make_bounded_store: StoreFactory) -> None:
    store = await make_bounded_store(100)
    with pytest.raises(ResourceExhausted):
        await write_bytes(store, b"x" * 101)


async def test_refcounted_pins() -> None:
    store = MemoryStore(200)
    digest = await write_bytes(store, b"a" * 150)
    first = store.pin([digest])
    second = store.pin([digest, digest])
    first.release()
    with pytest.raises(ResourceExhausted):
        await write_bytes(store, b"b" * 150)
    second.release()
    await write_bytes(store, b"b" * 150)
    assert await store.has_many([digest]) == [None]
    assert store.statistics().evicted_blobs == 1


@settings(max_examples=50, deadline=None)
@given(
    data=st.binary(max_size=3000),
    chunk=st.integers(1, 700),
    offset=st.integers(0, 3000),
    limit=st.one_of(st.none(), st.integers(0, 4000)),
)
async def test_ranges_match_slicing(
    data: bytes, chunk: int, offset: int, limit: int | None
) -> None:
    store = MemoryStore(1 << 20)
    digest = digest_of(data)
    await store.write(digest, chunked(data, chunk))
    if offset > len(data):
        with pytest.raises(OutOfRange):
            await read_range(store, digest, offset, limit)
    else:
        end = None if limit is None else offset + limit
        assert await read_range(store, digest, offset, limit) == data[offset:end]
