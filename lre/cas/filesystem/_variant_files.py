"""``VariantFiles``: the worker's file hand-offs with ``FilesystemStore``.

A blob can be stored as a plain file (mode 0o444) and as an executable one
(0o555), each its own inode, so a hardlink to one never changes the mode of
the other. This class is what the worker calls through the store:
``path_for_link`` returns the file of the variant it wants, copying the
other variant when that one is missing (on the event loop when the blob is
at most ``INLINE_BYTES`` and the store does not fsync, as small writes are:
Bazel 4 marks every input executable, so each source a user edits and
uploads needs its executable copy at its first staging, and a thread hop
there waits for a core on a machine a build keeps busy); ``adopt_file`` moves an action's
output file into the store instead of copying its bytes; ``discard`` throws
out a blob whose linked file an action altered. New files count against the
store's ``max_bytes`` through its ``ContentIndex`` like any write.

Failure: ``NotFound`` when the blob is absent (or its file vanished while
being copied; it then leaves the index), ``ResourceExhausted`` when the new
file does not fit or the disk is full (nothing partial is left),
``InvalidArgument`` when an adopted file is not what its digest says (the
file is left in place). Other ``OSError``s propagate.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import trio

from lre.cas.filesystem._blob_files import EXEC_MODE, PLAIN_MODE, hash_file
from lre.cas.filesystem._blob_scan import EXEC_VARIANT, PLAIN_VARIANT
from lre.cas.filesystem._blob_writes import BlobWriter
from lre.cas.filesystem._content_index import ContentIndex
from lre.cas.filesystem._inline import INLINE_BYTES, call_inline
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import InvalidArgument, NotFound

T = TypeVar("T")

_MODES = {PLAIN_VARIANT: PLAIN_MODE, EXEC_VARIANT: EXEC_MODE}


class VariantFiles:
    """Link paths, adoption and discards for the blobs of ``index``.

    ``FilesystemStore`` documents the three calls; file work runs through
    ``writer`` in threads of ``limiter``.
    """

    def __init__(
        self, index: ContentIndex, writer: BlobWriter, limiter: trio.CapacityLimiter
    ) -> None:
        self._index = index
        self._writer = writer
        self._limiter = limiter

    def stored_path_for_link(self, digest: Digest, executable: bool) -> str | None:
        """The file of ``digest``'s wanted variant when it is stored (counted
        as a use), else None: nothing to copy, nothing awaited."""
        index = self._index
        want = EXEC_VARIANT if executable else PLAIN_VARIANT
        if not index.variants(digest) & want:
            return None
        index.touch(digest)
        return index.path(digest, want)

    async def path_for_link(self, digest: Digest, executable: bool) -> str:
        """The file of ``digest``'s wanted variant, copied from the other if needed."""
        stored = self.stored_path_for_link(digest, executable)
        if stored is not None:
            await trio.lowlevel.checkpoint()
            return stored
        index = self._index
        want = EXEC_VARIANT if executable else PLAIN_VARIANT
        variants = index.variants(digest)
        if not variants:
            if digest != EMPTY_DIGEST:
                await trio.lowlevel.checkpoint()
                raise NotFound(f"blob {digest} is not in the CAS")
            source = None
        else:  # only the other variant is stored: copy it
            source = index.path(digest, PLAIN_VARIANT if variants & PLAIN_VARIANT else EXEC_VARIANT)
        with index.busy([digest]):
            await index.reserve(digest, digest.size_bytes)
            try:
                await index.wait_deleted(digest)
                final = index.path(digest, want)
                copy = (self._writer.copy_variant, digest, source, final, _MODES[want])
                try:
                    if digest.size_bytes <= INLINE_BYTES and not self._writer.fsync:
                        await call_inline(*copy)
                    else:
                        await self._run(*copy)
                except FileNotFoundError:
                    index.forget(digest)
                    raise NotFound(f"blob {digest} is not in the CAS") from None
                index.add(digest, want)
                return final
            finally:
                index.unreserve(digest.size_bytes)

    async def discard(self, digest: Digest) -> bool:
        """Drop ``digest`` and unlink both variants; False when it was not stored."""
        if digest not in self._index:
            await trio.lowlevel.checkpoint()
            return False
        await self._index.remove(digest)
        return True

    async def adopt_file(
        self, source: str, digest: Digest | None, executable: bool, source_fd: int | None = None
    ) -> Digest:
        """Move ``source`` in as the wanted variant and return its digest.

        With ``digest`` known (the worker hashed the output while collecting
        it), the file is hashed again and moved in (or unlinked, when the
        blob is already stored) in the same thread call, one round trip
        instead of two. Without it the file is hashed first. With
        ``source_fd`` the file is left in place and copied from that
        descriptor by the kernel, ``digest`` trusted unread.
        """
        index = self._index
        want = EXEC_VARIANT if executable else PLAIN_VARIANT
        if source_fd is not None:
            if digest is None:
                raise ValueError("a copy from a descriptor needs the digest it was hashed to")
            return await self._copy_trusted(source_fd, digest, want)
        expected = digest
        if digest is None:
            digest = await self._run(hash_file, source)
        if index.variants(digest) & want:
            index.touch(digest)
            if expected is None:
                await self._run(os.unlink, source)
            else:
                await self._run(self._check_and_move, source, digest, None, 0)
            return digest
        if expected is None:
            return await self._place(digest, want, self._writer.move_in, digest, source)
        return await self._place(digest, want, self._check_and_move, source, digest)

    async def _copy_trusted(self, source_fd: int, digest: Digest, want: int) -> Digest:
        index = self._index
        if index.variants(digest) & want:
            index.touch(digest)
            await trio.lowlevel.checkpoint()
            return digest
        return await self._place(digest, want, self._writer.copy_trusted, digest, source_fd)

    async def _place(
        self, digest: Digest, want: int, put: Callable[..., object], *args: object
    ) -> Digest:
        """``put(*args, final, mode)`` in a thread, with room reserved and the
        blob marked busy, then ``digest`` recorded as holding ``want``. Raises
        what ``check_fits`` or ``put`` raises, with nothing recorded."""
        index = self._index
        index.check_fits(digest)
        with index.busy([digest]):
            await index.reserve(digest, digest.size_bytes)
            try:
                await index.wait_deleted(digest)
                await self._run(put, *args, index.path(digest, want), _MODES[want])
                index.add(digest, want)
                return digest
            finally:
                index.unreserve(digest.size_bytes)

    def _check_and_move(self, source: str, digest: Digest, final: str | None, mode: int) -> None:
        """(thread) Hash ``source``, refuse it (left in place) unless it is
        ``digest``, then move it to ``final``, or unlink it when None."""
        actual = hash_file(source)
        if actual != digest:
            raise InvalidArgument(f"output file {source!r} has digest {actual}, expected {digest}")
        if final is None:
            os.unlink(source)
        else:
            self._writer.move_in(digest, source, final, mode)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
