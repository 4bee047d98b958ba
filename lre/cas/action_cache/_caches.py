"""The action cache: serialized ``ActionResult`` bytes keyed by action digest."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal, Protocol, TypeVar, runtime_checkable

import trio

from lre.cas.action_cache._log import LOG_NAME, ActionLog, scan
from lre.cas.filesystem._blob_scan import CONTENT_NAME, ContentUsage
from lre.cas.filesystem._inline import INLINE_BYTES, call_inline
from lre.digest import Digest
from lre.errors import ResourceExhausted

T = TypeVar("T")

log = logging.getLogger(__name__)


@runtime_checkable
class ActionCache(Protocol):
    """Opaque entries keyed by action digest.

    ``get`` returns the stored bytes or ``None``; ``put`` replaces any entry
    (raising ``ResourceExhausted`` when it cannot be stored). Parsing and the
    completeness check live in ``ActionResultCache``. ``known_absent`` is
    true only when the cache can tell from memory alone, safely from any
    thread, that it holds no entry (``False`` means "ask ``get``").
    """

    async def get(self, action_digest: Digest) -> bytes | None: ...

    async def put(self, action_digest: Digest, data: bytes) -> None: ...

    def known_absent(self, action_digest: Digest) -> bool: ...


class MemoryActionCache:
    """An in-memory ``ActionCache``, LRU-bounded by the bytes of its entries."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes: {max_bytes} must be positive")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Digest, bytes] = OrderedDict()
        self._bytes = 0

    def known_absent(self, action_digest: Digest) -> bool:
        """No entry for ``action_digest`` (safe from any thread)."""
        return action_digest not in self._entries

    async def get(self, action_digest: Digest) -> bytes | None:
        await trio.lowlevel.checkpoint()
        data = self._entries.get(action_digest)
        if data is not None:
            self._entries.move_to_end(action_digest)
        return data

    async def put(self, action_digest: Digest, data: bytes) -> None:
        await trio.lowlevel.checkpoint()
        if len(data) > self.max_bytes:
            raise ResourceExhausted(
                f"action result for {action_digest} ({len(data)} bytes) exceeds the "
                f"action cache's capacity of {self.max_bytes} bytes"
            )
        old = self._entries.pop(action_digest, None)
        if old is not None:
            self._bytes -= len(old)
        while self._entries and self._bytes + len(data) > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= len(dropped)
        self._entries[action_digest] = data
        self._bytes += len(data)

    def __len__(self) -> int:
        return len(self._entries)


class FilesystemActionCache:
    """An ``ActionCache`` in one append-only file, ``<path>/actions.log``
    (``lre/cas/action_cache/_log.py``), with its index in memory.

    A ``put`` is one ``write`` on the event loop (plus an ``fdatasync`` in a
    thread with ``fsync="always"``); a ``get`` is one ``pread``, in a thread
    for entries over ``INLINE_BYTES``. A reader never sees a partial entry,
    and a crash leaves at most a torn last record, cut off by the next
    ``open``. When replaced records outweigh the live ones (and at least
    16 MiB), or the live values exceed ``max_bytes``, the log is rewritten in
    a thread with the live entries (the oldest dropped down to three quarters
    of ``max_bytes``); ``put``s wait for that, ``get``s do not.

    Entries of the older layout (a file ``<path>/<hash[:2]>/<hash>-<size>``
    per entry) are moved into the log by ``open``. A disk full on ``put``
    raises ``ResourceExhausted``; a damaged entry reads as absent.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: Literal["never", "always"] = "never",
        thread_limiter: trio.CapacityLimiter | None = None,
        max_bytes: int | None = None,
    ) -> None:
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes: {max_bytes} must be positive")
        self.path = os.fspath(path)
        self.fsync = fsync == "always"
        self.max_bytes = max_bytes
        self._limiter = thread_limiter or trio.CapacityLimiter(2)
        self._log = ActionLog(self.path, fsync=self.fsync)
        self._opened = False
        #: A rewrite failed (disk full, ...): not tried again on every put.
        self._rewrite_failed = False
        # Held while the log's file may change under a thread (rewrite) or
        # is used by one (fdatasync, a large read).
        self._busy = trio.Lock()

    async def open(self) -> None:
        """Create the directory, move entries of the older layout into the
        log, remove temp files left by a crash and index the log. ``OSError``
        propagates."""
        await self._run(self._open)
        self._opened = True

    def close(self) -> None:
        """Close the log's file (``open`` may be called again)."""
        self._opened = False
        self._log.close()

    def _open(self) -> None:
        self._prepare()
        self._log.open()
        self._adopt_entry_files()

    def known_absent(self, action_digest: Digest) -> bool:
        """No entry for ``action_digest`` (safe from any thread: one dict
        lookup); False before ``open``."""
        return self._opened and _key(action_digest) not in self._log.index

    async def get(self, action_digest: Digest) -> bytes | None:
        key = _key(action_digest)
        slot = self._log.index.get(key) if self._opened else None
        if slot is None:
            await trio.lowlevel.checkpoint()
            return None
        if slot[1] <= INLINE_BYTES and not self._busy.locked():
            return await call_inline(self._log.read, key)
        async with self._busy:
            return await self._run(self._log.read, key)

    async def put(self, action_digest: Digest, data: bytes) -> None:
        if not self._opened:
            raise RuntimeError(f"action cache {self.path} is not open")
        key = _key(action_digest)
        if self._busy.locked() or self.fsync:
            async with self._busy:
                await trio.lowlevel.checkpoint_if_cancelled()
                self._append(key, data, action_digest)
                if self.fsync:
                    await self._run(self._log.sync)
        else:
            await call_inline(self._append, key, data, action_digest)
        if (
            not self._rewrite_failed
            and not self._busy.locked()
            and self._log.wants_compaction(self.max_bytes)
        ):
            await self._compact()

    def _append(self, key: str, data: bytes, digest: Digest) -> None:
        try:
            self._log.append(key, data)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ResourceExhausted(
                    f"action cache: no space left on its device while storing the result "
                    f"of {digest}"
                ) from None
            raise

    async def _compact(self) -> None:
        """Rewrite the log with its live entries (see the class docstring).
        A failure is logged and the old log kept."""
        keep = None if self.max_bytes is None else self.max_bytes * 3 // 4
        scratch = f"{self.path}/tmp/{LOG_NAME}.{secrets.token_hex(6)}"
        async with self._busy:
            before = len(self._log.index)
            try:
                with trio.CancelScope(shield=True):
                    fd, index, end = await self._run(self._log.compacted, keep, scratch)
            except OSError as error:
                log.warning("action cache %s: rewrite failed (%s); kept as it is", self.path, error)
                self._rewrite_failed = True
                return
            self._log.install_compacted(fd, index, end)
        log.info(
            "action cache %s: rewrote the log, %d of %d entries kept (%d bytes)",
            self.path,
            len(index),
            before,
            self._log.live_bytes,
        )

    async def usage(self) -> ContentUsage:
        """The entries and the bytes of their results, counted without
        changing anything (safe while a server uses the cache). ``OSError``s
        other than a missing directory propagate."""
        return await self._run(self._count, False)

    async def clear(self) -> ContentUsage:
        """Delete every entry and leftover temp file; returns what was
        deleted. Meant for a cache no server has open (``lre cache clean``):
        a concurrent ``put`` may survive. ``OSError``s other than a file
        already gone propagate."""
        async with self._busy:
            return await self._run(self._count, True)

    async def digests(self) -> list[Digest]:
        """The action digests with an entry, in the order they were stored
        (read from disk when the cache is not open)."""
        return await self._run(self._digests)

    def _digests(self) -> list[Digest]:
        index = self._log.index if self._opened else self._read_index()
        ordered = sorted(index.items(), key=lambda item: item[1][0])
        found: list[Digest] = []
        for key, _ in ordered:
            name = CONTENT_NAME.fullmatch(key)
            if name is not None and not name[3]:
                found.append(Digest(name[1], int(name[2])))
        return found

    def _read_index(self) -> dict[str, tuple[int, int, int]]:
        try:
            fd = os.open(f"{self.path}/{LOG_NAME}", os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        try:
            return scan(fd).index
        finally:
            os.close(fd)

    def _count(self, delete: bool) -> ContentUsage:
        index = self._log.index if self._opened else self._read_index()
        count = len(index)
        stored = sum(slot[1] for slot in index.values())
        files = self._entry_files()
        count += len(files)
        stored += sum(size for _, size in files)
        if delete:
            for path, _ in files:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}/{LOG_NAME}")
            if os.path.isdir(self.path):
                self._prepare()
                if self._opened:
                    self._log.open()
        return ContentUsage(count, stored)

    def _entry_files(self) -> list[tuple[str, int]]:
        """Entries of the older layout: (path, size) of each ``<xx>/<hash>-<size>``."""
        found: list[tuple[str, int]] = []
        for prefix in range(256):
            shard = f"{self.path}/{prefix:02x}"
            try:
                items = os.scandir(shard)
            except (FileNotFoundError, NotADirectoryError):
                continue
            with items:
                for item in items:
                    name = CONTENT_NAME.fullmatch(item.name)
                    if name is None or name[3] or not name[1].startswith(shard[-2:]):
                        continue
                    try:
                        found.append((item.path, item.stat(follow_symlinks=False).st_size))
                    except FileNotFoundError:
                        continue
        return found

    def _adopt_entry_files(self) -> None:
        """Move entries of the older layout into the log (each file is
        removed once its record is written; an unreadable one is skipped)."""
        files = self._entry_files()
        for path, _ in files:
            name = os.path.basename(path)
            if name not in self._log.index:
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                self._log.append(name, data)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if files:
            if self.fsync:
                self._log.sync()
            for prefix in range(256):
                with contextlib.suppress(OSError):
                    os.rmdir(f"{self.path}/{prefix:02x}")  # only when empty
            log.info("action cache %s: moved %d entries into %s", self.path, len(files), LOG_NAME)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def _prepare(self) -> None:
        os.makedirs(f"{self.path}/tmp", mode=0o700, exist_ok=True)
        with os.scandir(f"{self.path}/tmp") as leftovers:
            for item in leftovers:
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(item.path)


def _key(digest: Digest) -> str:
    return f"{digest.hash}-{digest.size_bytes}"
