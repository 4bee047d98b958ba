"""A filesystem store's immediate writes (``write_now``): the same blob, checks
and errors as ``write``, and ``False`` with nothing changed whenever ``write``
would have to wait (eviction, the free-disk floor, an fsync store, a large
blob, a batch of access times due)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio

from lre.cas import FilesystemStore, read_bytes
from lre.cas._blob_io import write_bytes
from lre.cas._protocol import ImmediateWrites
from lre.cas.filesystem._content_index import _TOUCH_BATCH
from lre.cas.filesystem._inline import INLINE_BYTES
from lre.digest import EMPTY_DIGEST, Digest, digest_of
from lre.errors import InvalidArgument, ResourceExhausted


async def _store(root: Path, max_bytes: int = 1 << 30, **kwargs: object) -> FilesystemStore:
    store = FilesystemStore(root / "cas", root / "tmp", max_bytes, **kwargs)  # type: ignore[arg-type]
    await store.open()
    return store


def _writes(store: FilesystemStore) -> ImmediateWrites:
    writes = store.capabilities().immediate_writes
    assert writes is not None
    return writes


def _file(root: Path, digest: Digest) -> Path:
    return root / "cas" / digest.hash[:2] / f"{digest.hash}-{digest.size_bytes}"


def _untouched(store: FilesystemStore, root: Path, digest: Digest) -> None:
    assert digest not in store._index
    assert not _file(root, digest).exists()
    assert list((root / "tmp").iterdir()) == []
    assert store._index.reserved_bytes == 0


async def test_a_small_blob_is_stored_as_write_stores_it(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    data = b"int main() { return 0; }\n"
    digest = digest_of(data)
    writes = _writes(store)
    assert not writes.present_now(digest)
    assert writes.write_now(digest, data)
    assert writes.present_now(digest)
    assert await read_bytes(store, digest) == data
    assert stat.S_IMODE(_file(tmp_path, digest).stat().st_mode) == 0o444
    assert list((tmp_path / "tmp").iterdir()) == []
    assert store.statistics().stored_bytes == len(data)
    assert store._index.reserved_bytes == 0
    assert writes.write_now(digest, data)  # present: accepted, counted once
    assert store.statistics().stored_bytes == len(data)
    assert writes.present_now(EMPTY_DIGEST)


async def test_a_mismatch_raises_as_write_does_and_stores_nothing(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    digest = digest_of(b"the real content")
    with pytest.raises(InvalidArgument) as wrong_hash:
        _writes(store).write_now(digest, b"other content!!!")
    assert digest.hash in str(wrong_hash.value)
    _untouched(store, tmp_path, digest)
    with pytest.raises(InvalidArgument) as too_long:
        _writes(store).write_now(digest, b"the real content and more")
    assert str(digest.size_bytes) in str(too_long.value)
    _untouched(store, tmp_path, digest)
    with pytest.raises(InvalidArgument) as by_write:
        await store.write(digest, _one(b"other content!!!"))
    assert str(by_write.value) == str(wrong_hash.value)


async def _one(data: bytes):  # type: ignore[no-untyped-def]
    yield data


async def test_a_blob_larger_than_the_store_is_refused(tmp_path: Path) -> None:
    store = await _store(tmp_path, max_bytes=100)
    data = os.urandom(200)
    with pytest.raises(ResourceExhausted):
        _writes(store).write_now(digest_of(data), data)
    _untouched(store, tmp_path, digest_of(data))


async def test_what_would_wait_is_left_to_write(tmp_path: Path) -> None:
    # Eviction needed: the store holds 900 of its 1000 bytes.
    full = await _store(tmp_path / "full", max_bytes=1000)
    old = await write_bytes(full, os.urandom(900))
    new = os.urandom(200)
    assert not _writes(full).write_now(digest_of(new), new)
    _untouched(full, tmp_path / "full", digest_of(new))
    assert old in full._index
    await write_bytes(full, new)  # the async path evicts and stores it
    assert old not in full._index and digest_of(new) in full._index

    # Under the free-disk floor: the async path evicts or names the floor.
    floor = await _store(tmp_path / "floor", min_free_bytes=10_000, free_disk=lambda: 10_100)
    small = b"x" * 200
    assert not _writes(floor).write_now(digest_of(small), small)
    _untouched(floor, tmp_path / "floor", digest_of(small))

    # An unlink of the same blob still in progress (an eviction's thread call).
    busy = await _store(tmp_path / "busy")
    busy._index._deleting[digest_of(small).hash] = trio.Event()
    assert not _writes(busy).write_now(digest_of(small), small)
    _untouched(busy, tmp_path / "busy", digest_of(small))

    # Larger than a call on the event loop may move.
    big = os.urandom(INLINE_BYTES + 1)
    plain = await _store(tmp_path / "plain")
    assert not _writes(plain).write_now(digest_of(big), big)
    _untouched(plain, tmp_path / "plain", digest_of(big))

    # A batch of access times due: the async write saves them with its blob.
    for n in range(_TOUCH_BATCH):
        plain._index._touched.add(f"{n:064x}")
    assert not _writes(plain).write_now(digest_of(small), small)
    _untouched(plain, tmp_path / "plain", digest_of(small))


async def test_an_fsync_store_offers_none(tmp_path: Path) -> None:
    store = await _store(tmp_path, fsync="always")
    assert store.capabilities().immediate_writes is None
