"""Moving an output into the CAS only while nothing else can write it.

An output file moved (adopted) into the CAS becomes the stored blob's own
inode. If any process other than lre still held it open, for writing or
through a shared writable mapping (an action may hand a descriptor of its
output to another action over a Unix socket before it ends), that process
could change the stored blob later. ``unshared_adopter(adopt, store)`` wraps
a store's ``adopt_file``: it opens the file itself (without following a
symlink) and asks for a write lease on it (``fcntl F_SETLEASE F_WRLCK``),
which the kernel grants only when no other open file for writing exists for
the inode; the lease is let go at once (held, any open by lre's own store
would break it) and the file moved. Nothing can open it in between: its
path is in no action's view, and nothing of the action runs any more (the
caller adopts only then). A lease break is signalled with SIGURG, whose
default is to be ignored, not SIGIO, whose default ends the process. When
the lease is refused (another holder, or a filesystem without leases) the
file is copied into the store through the descriptor lre holds instead, so
the stored blob is a new inode no one else has; the store verifies its
digest as usual (a file changed since it was hashed fails the write with
``InvalidArgument``).

An output of a view (its overlay's upper layer, a tmpfs of the action's own)
is never moved: the tmpfs goes whole at recycling. The scan hashed it under
a write lease it still holds (``FoundFile.held``, see ``_outputs``), so it
was lre's alone from before its hash on: when that lease is still whole
here, it is copied by the kernel from the held descriptor and its digest
trusted (``adopt_file``'s ``source_fd``); a lease broken since (something
opened the file: an action that kept a directory descriptor of that tmpfs,
passed over a socket) means it may have changed, and it is read and
verified like any copy.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from lre.cas import BlobStore
from lre.digest import Digest
from lre.worker.outputs._leases import drop_lease, holds_lease, take_lease
from lre.worker.outputs._upload import Adopter

__all__ = ["unshared_adopter"]

_CHUNK = 1 << 20


def _open_leased(path: Path) -> tuple[int, bool]:
    """(thread) Open ``path`` read-only, not following a symlink, and try the
    write lease: (fd, leased). A leased file of another user (the one the
    action ran as) is given to lre's user, so that the store may move it and
    the stored blob is never that user's; when that fails it is not leased
    (copied instead). Raises ``OSError`` when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not take_lease(fd):
        return fd, False
    try:
        drop_lease(fd)
    except OSError:
        os.close(fd)
        raise
    if os.fstat(fd).st_uid != os.geteuid():
        try:
            os.fchown(fd, os.geteuid(), os.getegid())
        except OSError:
            return fd, False
    return fd, True


async def _chunks(fd: int) -> AsyncIterator[bytes]:
    offset = 0
    while True:
        chunk = await trio.to_thread.run_sync(os.pread, fd, _CHUNK, offset)
        if not chunk:
            return
        offset += len(chunk)
        yield chunk


def unshared_adopter(adopt: Adopter, store: BlobStore) -> Adopter:
    """``adopt`` for files no other process holds open for writing, a copy
    through lre's own descriptor for the rest; a held file (``source_fd``)
    copied trusted only while its lease is whole (see the module docstring)."""

    async def guarded(
        path: Path, digest: Digest, executable: bool, *, source_fd: int | None = None
    ) -> object:
        if source_fd is not None:
            if await trio.to_thread.run_sync(holds_lease, source_fd):
                return await adopt(path, digest, executable, source_fd=source_fd)
            await store.write(digest, _chunks(source_fd))
            return None
        fd, leased = await trio.to_thread.run_sync(_open_leased, path)
        try:
            if leased:
                return await adopt(path, digest, executable)
            await store.write(digest, _chunks(fd))
            return None
        finally:
            os.close(fd)

    return guarded
