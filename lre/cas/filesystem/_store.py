"""``FilesystemStore``: blobs as files on local disk, LRU-bounded.

Layout under ``content_path``: ``<hash[:2]>/<hash>-<size>`` holds the plain
variant of a blob (mode 0o444) and ``<hash[:2]>/<hash>-<size>.x`` the
executable variant (mode 0o555), each its own inode, so a worker that
hardlinks one variant into an action directory can never change the mode of
the other. A blob is present when either variant is; the missing variant is
created by copy when the worker asks for it, and its bytes count against
``max_bytes``. ``temp_path`` holds uploads in progress and must be on the
same filesystem (checked at ``open``).

Crash safety: a blob is written to a fresh file in ``temp_path`` and moved
into ``content_path`` with one ``rename`` only after its size and hash were
verified, so a crash (or SIGKILL, or a cancelled writer) never leaves a
partial blob visible. ``open`` deletes whatever is left in ``temp_path`` and
any content file whose size differs from the size in its name.

``fsync="always"`` fsyncs each file before the rename and its directory after
it: a blob visible after a power loss is complete. ``fsync="never"`` skips
both: a crash of lre is safe, a power loss may lose recent blobs (they are
then either absent or detected at ``open`` by their size and removed, or, in
the rare case of a same-size but zeroed file, reported on read by a
``VerifyStore``-style hash check if configured).

LRU: the order lives in memory (``ContentIndex``) and is rebuilt at ``open``
from file mtimes; uses since the last write are saved as mtimes by
``close()`` (and in batches while running), so a restart keeps the order up
to the last flush.

Blocking file I/O runs in threads through one ``trio.CapacityLimiter`` (by
default 4 threads, or the limiter passed in and shared by the process), except
reads and (without fsync) writes of at most ``INLINE_BYTES`` in one call, which
run on the event loop (lre/cas/filesystem/_inline.py says why; Actions, Commands,
Directories and most source files are this small). The file primitives those
calls use (temp files, checked reads, hashing) are in ``_blob_files.py``, the
writes built on them in ``_blob_writes.py``, the index rebuild of ``open`` in
``_blob_scan.py``, the index with the LRU and eviction in ``_content_index.py``,
the worker's calls (``path_for_link``, ``adopt_file``, ``discard``) in
``_variant_files.py`` and whole small writes without a task
(``immediate_writes``) in ``_immediate_writes.py``. This module keeps the
``BlobStore`` calls and the pins, and decides which file calls run on the loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Sequence,
)
from typing import Literal, TypeVar

import trio

from lre.cas._pins import Pin, PinTable
from lre.cas._protocol import StoreCapabilities
from lre.cas._statistics import StoreStatistics
from lre.cas._streams import closing_stream
from lre.cas._verify import BlobVerifier, check_read_range
from lre.cas.filesystem._blob_files import (
    ShortRead,
    TempFile,
    open_checked,
    read_range,
    touch_all,
)
from lre.cas.filesystem._blob_scan import EXEC_VARIANT, PLAIN_VARIANT, scan_content_used
from lre.cas.filesystem._blob_writes import BlobWriter
from lre.cas.filesystem._content_index import FREE_DISK_MAX_AGE_S, ContentIndex, ShrinkReport
from lre.cas.filesystem._immediate_writes import ImmediateWriter
from lre.cas.filesystem._inline import INLINE_BYTES, call_inline
from lre.cas.filesystem._variant_files import VariantFiles
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import NotFound

T = TypeVar("T")

_PLAIN = PLAIN_VARIANT
_EXEC = EXEC_VARIANT
_WRITE_BUFFER = 1 << 20


class FilesystemStore:
    """A ``BlobStore`` on local disk with pins, exec variants and adoption.

    Build it, then ``await open()`` (scans the content directory; blobs
    become readable). ``max_bytes`` bounds the bytes of all variant files;
    writes beyond it evict unpinned blobs, least recently used first, down
    to ``max_bytes - evict_bytes``. The cache contract: a blob used (found,
    read, written) in the last ``keep_told_s`` seconds is never evicted, nor
    a pinned one; when those fill ``max_bytes`` the store overruns it while
    the disk keeps ``min_free_bytes`` free (``on_overrun`` hears of each
    overrun once), and a write past that floor raises ``ResourceExhausted``
    naming it and stores nothing (the free disk is read with ``statvfs``
    at most every ``free_disk_max_age_s`` while the disk keeps twice the floor,
    at every write nearer to it). Without a floor (0) there is no overrun:
    a write that does not fit raises ``ResourceExhausted``. Running out of disk space
    (ENOSPC/EDQUOT) also raises ``ResourceExhausted``, leaves nothing
    partial and keeps every present blob readable.

    ``has_many`` answers from memory. A file that vanished behind the store's
    back is noticed on ``read``/``path_for_link``: it is dropped from the
    index and the call raises ``NotFound``.
    """

    def __init__(
        self,
        content_path: str | os.PathLike[str],
        temp_path: str | os.PathLike[str],
        max_bytes: int,
        *,
        evict_bytes: int = 0,
        fsync: Literal["never", "always"] = "never",
        read_chunk_size: int = 1 << 20,
        thread_limiter: trio.CapacityLimiter | None = None,
        keep_told_s: float = 0.0,
        min_free_bytes: int = 0,
        on_overrun: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        free_disk: Callable[[], int] | None = None,
        free_disk_max_age_s: float = FREE_DISK_MAX_AGE_S,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes: {max_bytes} must be positive (no store is unbounded)")
        if not 0 <= evict_bytes < max_bytes:
            raise ValueError(f"evict_bytes: {evict_bytes} must be in [0, max_bytes)")
        if fsync not in ("never", "always"):
            raise ValueError(f'fsync: {fsync!r} is not "never" or "always"')
        if read_chunk_size <= 0:
            raise ValueError(f"read_chunk_size: {read_chunk_size} must be positive")
        self.content_path = os.fspath(content_path)
        self.temp_path = os.fspath(temp_path)
        self.max_bytes = max_bytes
        self.evict_bytes = evict_bytes
        self.fsync = fsync == "always"
        self.read_chunk_size = read_chunk_size
        self._limiter = thread_limiter or trio.CapacityLimiter(4)
        self._writer = BlobWriter(self.temp_path, fsync=self.fsync)
        self._pins = PinTable()
        self._index = ContentIndex(
            self.content_path,
            max_bytes,
            evict_bytes,
            self._pins,
            self._limiter,
            keep_told_s=keep_told_s,
            min_free_bytes=min_free_bytes,
            clock=clock,
            free_disk=free_disk,
            on_overrun=on_overrun,
            free_disk_max_age_s=free_disk_max_age_s,
        )
        self._variants = VariantFiles(self._index, self._writer, self._limiter)
        self._opened = False
        immediate = ImmediateWriter(self._index, self._writer, self._check_open)
        self._capabilities = StoreCapabilities(
            pin=self.pin,
            statistics=self.statistics,
            local_files=self,
            immediate_reads=self,
            immediate_writes=None if self.fsync else immediate,
        )

    # ------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Create the directories, clear ``temp_path`` and rebuild the index.

        Raises ``FailedPrecondition`` when the two directories are on
        different filesystems. If the blobs found exceed ``max_bytes`` the
        oldest are evicted.
        """
        entries = await self._run(scan_content_used, self.content_path, self.temp_path)
        self._index.load(entries)
        self._opened = True
        await self._index.trim()

    async def close(self) -> None:
        """Save the LRU order (access times) to disk. The store stays usable."""
        await self._flush_touched()

    async def flush_access_times(self) -> None:
        """Write pending uses to the files' mtimes (what ``open`` orders by)."""
        await self._flush_touched()

    # ------------------------------------------------------------ protocol

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        return self._index.find_many(digests)

    async def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        """Yield the requested range in chunks of ``read_chunk_size``.

        Errors as in ``BlobStore`` (at the first iteration). The file is
        opened before the first byte is yielded; an eviction after that does
        not disturb this read. Close the iterator (``aclose``) when stopping
        early.
        """
        self._check_open()
        variants = self._index.variants(digest)
        if not variants:
            if digest != EMPTY_DIGEST:
                await trio.lowlevel.checkpoint()
                raise NotFound(f"blob {digest} is not in the CAS")
            check_read_range(digest, offset, limit)
            await trio.lowlevel.checkpoint()
            return
        length = check_read_range(digest, offset, limit)
        self._index.touch(digest)
        variant = _PLAIN if variants & _PLAIN else _EXEC
        path = self._index.path(digest, variant)
        chunk = self.read_chunk_size
        if length <= chunk:
            try:
                data = await self._run_maybe_inline(
                    length <= INLINE_BYTES, read_range, path, offset, length
                )
            except (FileNotFoundError, ShortRead):
                self._index.forget(digest)
                raise NotFound(f"blob {digest} is not in the CAS") from None
            yield data
            return
        try:
            fd = await self._run(open_checked, path, digest.size_bytes)
        except (FileNotFoundError, ShortRead):
            self._index.forget(digest)
            raise NotFound(f"blob {digest} is not in the CAS") from None
        try:
            position, end = offset, offset + length
            while position < end:
                n = min(chunk, end - position)
                data = await self._run(os.pread, fd, n, position)
                if len(data) != n:
                    self._index.forget(digest)
                    raise NotFound(f"blob {digest} is not in the CAS (its file was truncated)")
                position += n
                yield data
        finally:
            os.close(fd)

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None:
        """Store ``chunks`` under ``digest`` once size and hash are verified.

        Raises ``InvalidArgument`` (mismatch) or ``ResourceExhausted`` (over
        ``max_bytes`` with everything else pinned, or the disk is full). On
        any error or cancellation the temp file is removed and nothing
        becomes visible. A present blob is not written again.
        """
        self._check_open()
        if digest in self._index:
            self._index.touch(digest)
            await trio.lowlevel.checkpoint()
            return
        self._index.check_fits(digest)
        with self._index.busy([digest]):
            await self._index.reserve(digest, digest.size_bytes)
            temp: TempFile | None = None
            try:
                verifier = BlobVerifier(digest)
                pending: list[bytes] = []
                pending_bytes = 0
                async with closing_stream(chunks):
                    async for chunk in chunks:
                        verifier.check_total(verifier.received + pending_bytes + len(chunk))
                        pending.append(chunk)
                        pending_bytes += len(chunk)
                        if pending_bytes >= _WRITE_BUFFER:
                            if temp is None:
                                temp = await self._run(self._writer.new_temp, digest)
                            await self._run(temp.append, verifier, pending)
                            pending, pending_bytes = [], 0
                await self._index.wait_deleted(digest)
                touched = self._index.touched_batch()
                final = self._index.path(digest, _PLAIN)
                if temp is None:
                    await self._run_maybe_inline(
                        self._small_write(digest.size_bytes, touched),
                        self._writer.write_small,
                        digest,
                        verifier,
                        pending,
                        final,
                        touched,
                    )
                else:
                    await self._run(temp.append, verifier, pending)
                    await self._run(temp.commit, verifier, final, touched)
                    temp = None
                self._index.add(digest, _PLAIN)
            finally:
                self._index.unreserve(digest.size_bytes)
                if temp is not None:
                    with trio.CancelScope(shield=True):
                        await self._run(temp.discard)

    # Answers given at once on another thread (``immediate_reads``): they only
    # read the index and the files, and queue their uses for this store's thread.

    def sizes_now(self, hashes: Sequence[str], sizes: Sequence[int]) -> list[int | None] | None:
        """``has_many_hashes`` from any thread; ``None`` before ``open``."""
        if not self._opened:
            return None
        return self._index.peek_many_hashes(hashes, sizes)

    def read_now(self, digest: Digest, offset: int, limit: int) -> bytes | None:
        """The bytes of a read of at most ``INLINE_BYTES`` (``limit`` 0 = to
        the end), from any thread. ``None`` whenever the answer is not that
        simple (before ``open``, a bad or large range, an absent blob, its
        file gone): ``read`` then gives it, with its errors."""
        if not self._opened or offset < 0 or limit < 0 or offset > digest.size_bytes:
            return None
        remaining = digest.size_bytes - offset
        length = remaining if limit == 0 else min(limit, remaining)
        if length > INLINE_BYTES:
            return None
        path = self._index.peek_path(digest)
        if path is None:
            return None
        try:
            return read_range(path, offset, length)
        except (OSError, ShortRead):
            return None

    # ------------------------------------------------------------ extras

    async def evict_to(self, max_bytes: int, *, force: bool = False) -> ShrinkReport:
        """Evict idle, unpinned blobs, least recently used first, until the
        store holds at most ``max_bytes`` (0 empties it); its own bound is
        unchanged. Blobs under the cache contract (told to a client within
        ``keep_told_s``) stay unless ``force``; pinned ones always stay.
        ``lre cache gc`` and ``lre cache clean`` use this, through the running
        server or on a store no server has open. Unlink errors other than a
        vanished file propagate (the evicted blobs are gone from the index
        either way)."""
        self._check_open()
        return await self._index.shrink_to(max_bytes, force=force)

    def told_bytes(self) -> int:
        """Bytes of the blobs the cache contract holds right now."""
        return self._index.told_bytes()

    def capabilities(self) -> StoreCapabilities:
        """Pins, statistics, own files, lookups from any thread, small writes."""
        return self._capabilities

    def pin(self, digests: Iterable[Digest]) -> Pin:
        """Keep ``digests`` (both variants) from eviction until released."""
        return self._pins.pin(digests)

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            blob_count=len(self._index),
            stored_bytes=self._index.stored_bytes,
            max_bytes=self.max_bytes,
            pinned_blobs=len(self._pins),
            evicted_blobs=self._index.evicted_blobs,
            evicted_bytes=self._index.evicted_bytes,
            overrun_bytes=self._index.overrun_bytes,
            min_free_bytes=self._index.min_free_bytes,
            keep_told_s=self._index.keep_told_s,
        )

    async def path_for_link(self, digest: Digest, executable: bool) -> str:
        """Path of a file holding ``digest`` for the worker to hardlink.

        The file's inode is dedicated to this content and mode (0o555 when
        ``executable``, else 0o444); the missing variant is created by copy.
        Pin the digest first so the file is not evicted before it is linked.
        Raises ``NotFound`` when the blob is absent and ``ResourceExhausted``
        when the new variant does not fit.
        """
        self._check_open()
        return await self._variants.path_for_link(digest, executable)

    def stored_path_for_link(self, digest: Digest, executable: bool) -> str | None:
        """``path_for_link`` without waiting: the path when the wanted variant
        is stored already, else None (absent, or only the other variant:
        ask ``path_for_link``). Pin the digest first, as for ``path_for_link``.
        Raises ``RuntimeError`` when the store is not open."""
        self._check_open()
        return self._variants.stored_path_for_link(digest, executable)

    async def discard(self, digest: Digest, executable: bool) -> bool:
        """Forget ``digest`` and unlink its files because one was found altered.

        Called by the worker when an action wrote to or chmodded a hardlinked
        input, i.e. the ``executable`` variant's inode no longer holds what
        the digest names. Both variants leave the index at once (on the event
        loop, so no later read, ``has_many`` or ``path_for_link`` sees them;
        a missing variant might have been copied from the altered one) and
        their files are unlinked in a shielded thread call; writers of the
        same digest wait for that, so a client's re-upload lands in a fresh
        inode. Returns False when the blob was not stored (nothing done).
        Unlink errors other than a vanished file propagate after the index
        entry is gone (the blob is never served either way).
        """
        self._check_open()
        return await self._variants.discard(digest)

    async def adopt_file(
        self,
        path: str | os.PathLike[str],
        digest: Digest | None = None,
        executable: bool = False,
        *,
        source_fd: int | None = None,
    ) -> Digest:
        """Move the regular file at ``path`` into the store; return its digest.

        The file is hashed first; when ``digest`` is given and differs,
        ``InvalidArgument`` is raised and the file is left where it was.
        Otherwise the file is renamed into the slot of its variant (copied
        when ``path`` is on another filesystem) and on success ``path`` no
        longer exists (it is deleted when the blob was already stored). The
        caller must not modify the file while it is adopted. Raises
        ``ResourceExhausted`` when it does not fit.

        With ``source_fd`` (an open descriptor of that file; ``digest``
        required, else ``ValueError``) the file is copied instead, by the
        kernel from that descriptor, and left in place; it is not read or
        hashed again: the caller vouches that nothing changed it since it
        was hashed to ``digest``. A file shorter than ``digest`` says raises
        ``InvalidArgument`` (nothing stored); a longer one is cut at the
        digest's size.
        """
        self._check_open()
        return await self._variants.adopt_file(os.fspath(path), digest, executable, source_fd)

    # ------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if not self._opened:
            raise RuntimeError("FilesystemStore used before open()")

    async def _flush_touched(self) -> None:
        paths = self._index.take_touched()
        if paths:
            await self._run(touch_all, paths)
        else:
            await trio.lowlevel.checkpoint()

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def _small_write(self, nbytes: int, touched: list[str]) -> bool:
        """Whether a write of ``nbytes`` may run on the event loop: small, no
        fsync, and no batch of access times to save with it."""
        return nbytes <= INLINE_BYTES and not self.fsync and not touched

    async def _run_maybe_inline(self, inline: bool, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the event loop when ``inline`` (between a
        cancellation check and a checkpoint), else in a thread like ``_run``."""
        if not inline:
            return await self._run(fn, *args)
        return await call_inline(fn, *args)
