"""Batch reads and writes: ``read_blobs`` / ``write_blobs`` over every store kind."""

from __future__ import annotations

import os
from pathlib import Path

from lre.cas import FilesystemStore, read_blobs, write_blobs
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
    assert await write_blobs(store, list(zip(digests, data, strict=True))) == [None] * 600
    assert os.listdir(tmp_path / "tmp") == []
    again = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 30)
    await again.open()
    assert await read_blobs(again, digests) == data
    gone = digests[5]
    os.unlink(tmp_path / "cas" / gone.hash[:2] / f"{gone.hash}-{gone.size_bytes}")
    contents = await read_blobs(again, digests)
    assert isinstance(contents[5], NotFound)
    assert contents[:5] == data[:5]
    assert await again.has_many([gone]) == [None]
    assert again.statistics().stored_bytes == 599 * 300
