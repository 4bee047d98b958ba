"""Batch reads and writes: ``read_blobs`` / ``write_blobs`` over every store kind,
and the bulk methods (``read_many`` / ``write_many``) of the bounded stores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lre.cas import FilesystemStore, MemoryStore, read_blobs, sizes_of, write_blobs
from lre.cas._protocol import BulkBlobStore
from lre.digest import EMPTY_DIGEST, Digest, digest_of
from lre.errors import InvalidArgument, NotFound, ResourceExhausted
from tests.cas.conftest import StoreFactory, pin


def blobs_of(count: int, size: int = 100) -> list[bytes]:
    return [os.urandom(size) for _ in range(count)]


async def test_write_then_read_a_batch_with_per_blob_errors(make_store: StoreFactory) -> None:
    store = await make_store()
    good = blobs_of(300)
    present = b"already there"
    assert await write_blobs(store, [(digest_of(present), present)]) == [None]
    wrong_size = b"sized wrongly"
    wrong_hash = b"hashed wrongly"
    batch = [
        *((digest_of(b), b) for b in good),
        (Digest(digest_of(wrong_size).hash, 99), wrong_size),
        (digest_of(b"something else"), wrong_hash),
        (digest_of(present), present),
        (digest_of(good[0]), good[0]),  # twice in one batch
        (EMPTY_DIGEST, b""),
    ]
    outcomes = await write_blobs(store, batch)
    assert outcomes[:300] == [None] * 300
    size_error, hash_error = outcomes[300], outcomes[301]
    assert isinstance(size_error, InvalidArgument)
    assert "received 13 bytes, expected 99" in size_error.message
    assert isinstance(hash_error, InvalidArgument)
    assert "data hashes to" in hash_error.message
    assert outcomes[302:] == [None, None, None]
    absent = digest_of(b"never written")
    asked = [digest_of(b) for b in good] + [absent, EMPTY_DIGEST, digest_of(present)]
    contents = await read_blobs(store, asked)
    assert contents[:300] == good
    assert isinstance(contents[300], NotFound)
    assert str(absent) in contents[300].message
    assert contents[301:] == [b"", present]
    sizes = await store.has_many([digest_of(wrong_size), digest_of(b"something else")])
    assert sizes == [None, None]


@pytest.mark.parametrize("kind", ["memory", "filesystem"])
async def test_bounded_stores_are_bulk_stores(kind: str, tmp_path: Path) -> None:
    store: MemoryStore | FilesystemStore
    if kind == "memory":
        store = MemoryStore(1 << 20)
    else:
        store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 20)
        await store.open()
    bulk: BulkBlobStore | None = store.capabilities().bulk
    assert bulk is store
    data = blobs_of(10)
    assert await store.write_many([(digest_of(b), b) for b in data]) == [None] * 10
    assert store.statistics().stored_bytes == 1000
    assert store.statistics().blob_count == 10
    assert await store.read_many([digest_of(b) for b in data]) == data
    assert await store.read_many([digest_of(b"nope")]) == [None]


async def test_batch_that_does_not_fit_stores_what_fits(make_bounded_store: StoreFactory) -> None:
    store = await make_bounded_store(1000)
    pinned = os.urandom(700)
    assert await write_blobs(store, [(digest_of(pinned), pinned)]) == [None]
    held = pin(store, [digest_of(pinned)])
    small = blobs_of(2, 100)
    big = os.urandom(400)
    outcomes = await write_blobs(store, [(digest_of(b), b) for b in [*small, big]])
    assert outcomes[:2] == [None, None]
    assert isinstance(outcomes[2], ResourceExhausted)
    assert await store.has_many([digest_of(b) for b in [pinned, *small, big]]) == [
        700,
        100,
        100,
        None,
    ]
    held.release()
    huge = os.urandom(2000)
    (refused,) = await write_blobs(store, [(digest_of(huge), huge)])
    assert isinstance(refused, ResourceExhausted)


async def test_filesystem_batch_survives_reopen_and_vanished_files(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 30)
    await store.open()
    data = blobs_of(600, 300)
    digests = [digest_of(b) for b in data]
    assert await store.write_many(list(zip(digests, data, strict=True))) == [None] * 600
    assert os.listdir(tmp_path / "tmp") == []
    again = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 30)
    await again.open()
    assert await again.read_many(digests) == data
    gone = digests[5]
    os.unlink(tmp_path / "cas" / gone.hash[:2] / f"{gone.hash}-{gone.size_bytes}")
    contents = await again.read_many(digests)
    assert contents[5] is None
    assert contents[:5] == data[:5]
    assert await again.has_many([gone]) == [None]
    assert again.statistics().stored_bytes == 599 * 300


async def test_sizes_of_agrees_with_has_many(make_store: StoreFactory) -> None:
    store = await make_store()
    data = blobs_of(20)
    await write_blobs(store, [(digest_of(b), b) for b in data[:10]])
    asked = [digest_of(b) for b in data] + [
        EMPTY_DIGEST,
        Digest(digest_of(data[0]).hash, 99),  # present hash, other size
        digest_of(data[3]),
    ]
    expected = await store.has_many(asked)
    got = await sizes_of(store, [d.hash for d in asked], [d.size_bytes for d in asked])
    assert got == expected
    assert got == [100] * 10 + [None] * 10 + [0, None, 100]
