"""Putting an action's outputs, logs and Tree blobs into the CAS.

Blobs the store already holds are skipped (one ``has_many`` call). With a
store that can adopt files (the filesystem store's ``adopt_file``), output
files are moved into the CAS instead of being copied; otherwise small files
are written from memory and large ones streamed from disk.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path

import trio

from lre.cas._protocol import BlobStore
from lre.digest import EMPTY_DIGEST, Digest
from lre.worker._outputs import FoundFile

_CHUNK = 1 << 20
UPLOAD_CONCURRENCY = 16

#: ``adopt(path, digest, executable)`` moves the file at ``path`` into the
#: CAS as ``digest``; afterwards ``path`` may no longer exist.
Adopter = Callable[[Path, Digest, bool], Awaitable[object]]


async def _single(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    fd = await trio.to_thread.run_sync(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while True:
            chunk = await trio.to_thread.run_sync(os.read, fd, _CHUNK)
            if not chunk:
                return
            yield chunk
    finally:
        os.close(fd)


async def upload_outputs(
    store: BlobStore,
    files: Iterable[FoundFile],
    blobs: dict[Digest, bytes],
    *,
    adopt: Adopter | None = None,
) -> None:
    """Make every file and blob present in ``store``.

    Raises what the store raises (``ResourceExhausted`` when full,
    ``InvalidArgument`` when a file changed while being read).
    """
    by_digest: dict[Digest, FoundFile] = {}
    for item in files:
        if item.digest != EMPTY_DIGEST:
            by_digest.setdefault(item.digest, item)
    wanted = list(by_digest) + [d for d in blobs if d not in by_digest]
    if not wanted:
        return
    sizes = await store.has_many(wanted)
    missing = [d for d, size in zip(wanted, sizes, strict=True) if size is None]
    if not missing:
        return
    limiter = trio.CapacityLimiter(UPLOAD_CONCURRENCY)

    async def one(digest: Digest) -> None:
        async with limiter:
            item = by_digest.get(digest)
            if item is None:
                await store.write(digest, _single(blobs[digest]))
            elif adopt is not None:
                await adopt(item.path, digest, item.executable)
            elif item.data is not None:
                await store.write(digest, _single(item.data))
            else:
                await store.write(digest, _file_chunks(item.path))

    if len(missing) == 1:
        await one(missing[0])
        return
    async with trio.open_nursery() as nursery:
        for digest in missing:
            nursery.start_soon(one, digest)
