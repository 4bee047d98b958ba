"""Putting an action's outputs, logs and Tree blobs into the CAS.

Blobs the store already holds are skipped (one ``has_many`` call). With a
store that can adopt files (the filesystem store's ``adopt_file``), output
files marked ``movable`` are moved into the CAS instead of being copied;
otherwise small files are written from memory and large ones streamed from
disk, opened again beneath the input root without following symlinks. The
store checks every written blob against its digest, so a file changed since
it was hashed is refused, never stored under the old digest.

Failures end the action, never lre: a store error is re-raised as the same
kind of ``LreError`` with the output's path and size in its message (a file
truncated since it was hashed: ``InvalidArgument``; one larger than the
CAS: ``ResourceExhausted``), and of several uploads failing at once (they
run side by side in a nursery, which groups their errors) the first is
raised alone, never an exception group.
"""

from __future__ import annotations

import copy
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Iterable
from pathlib import Path
from typing import Protocol

import trio

from lre.cas import BlobStore
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import InvalidArgument, LreError
from lre.worker.directories import SymlinkInPath, open_beneath
from lre.worker.outputs._outputs import FoundFile, close_held
from lre.worker.outputs._task_errors import single_error_nursery

_CHUNK = 1 << 20
UPLOAD_CONCURRENCY = 16


class Adopter(Protocol):
    """``adopt(path, digest, executable)`` moves the file at ``path`` into
    the CAS as ``digest``; afterwards ``path`` may no longer exist. With
    ``source_fd`` (the file's held descriptor, ``FoundFile.held``) it is
    copied from that descriptor instead and left in place."""

    def __call__(
        self, path: Path, digest: Digest, executable: bool, *, source_fd: int | None = None
    ) -> Awaitable[object]: ...


async def _single(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _open_found(item: FoundFile) -> int:
    """(thread) Open ``item`` for reading: beneath its root without following
    links, non-blocking (a FIFO put there cannot hang lre), regular files only."""
    if item.root is None:
        fd = os.open(item.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    else:
        root_fd = os.open(item.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = open_beneath(root_fd, item.relative, os.O_RDONLY | os.O_NONBLOCK)
        except SymlinkInPath:
            raise InvalidArgument(f"output {item.relative!r} was replaced by a symlink") from None
        finally:
            os.close(root_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidArgument(f"output {item.relative or item.path.name!r} is not a regular file")
    return fd


async def _file_chunks(item: FoundFile) -> AsyncIterator[bytes]:
    if item.held is not None:  # closed by upload_outputs
        offset = 0
        while chunk := await trio.to_thread.run_sync(os.pread, item.held, _CHUNK, offset):
            offset += len(chunk)
            yield chunk
        return
    fd = await trio.to_thread.run_sync(_open_found, item)
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
    """Make every file and blob present in ``store``; the descriptors
    ``files`` hold (``FoundFile.held``) are closed on return, whatever
    happened.

    Raises what the store raises (``ResourceExhausted`` when full,
    ``InvalidArgument`` when a file changed while being read).
    """
    files = list(files)
    try:
        await _upload(store, files, blobs, adopt)
    finally:
        close_held(files)


async def _upload(
    store: BlobStore,
    files: list[FoundFile],
    blobs: dict[Digest, bytes],
    adopt: Adopter | None,
) -> None:
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
            try:
                if item is None:
                    await store.write(digest, _single(blobs[digest]))
                elif adopt is not None and item.held is not None:
                    await adopt(item.path, digest, item.executable, source_fd=item.held)
                elif adopt is not None and item.movable:
                    await adopt(item.path, digest, item.executable)
                elif item.data is not None:
                    await store.write(digest, _single(item.data))
                else:
                    await store.write(digest, _file_chunks(item))
            except LreError as error:
                raise _naming(error, item, digest) from None

    if len(missing) == 1:
        await one(missing[0])
        return
    async with single_error_nursery() as nursery:
        for digest in missing:
            nursery.start_soon(one, digest)


def _naming(error: LreError, item: FoundFile | None, digest: Digest) -> LreError:
    """``error`` of the store, its message saying which output it was about."""
    if item is None:
        what = f"the action's Tree or Directory blob {digest}"
    else:
        what = f"output {item.relative or item.path.name!r}"
    named = copy.copy(error)
    named.message = f"storing {what} ({digest.size_bytes} bytes) failed: {error.message}"
    named.args = (named.message,)
    return named
