"""The action cache: serialized ``ActionResult`` bytes keyed by action digest."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal, Protocol, TypeVar, runtime_checkable

import trio

from lre.cas._blob_scan import CONTENT_NAME, ContentUsage
from lre.cas._inline import INLINE_BYTES, call_inline
from lre.digest import Digest
from lre.errors import ResourceExhausted

T = TypeVar("T")


@runtime_checkable
class ActionCache(Protocol):
    """Opaque entries keyed by action digest.

    ``get`` returns the stored bytes or ``None``; ``put`` replaces any entry
    (raising ``ResourceExhausted`` when it cannot be stored). Parsing and the
    completeness check live in ``ActionResultCache``.
    """

    async def get(self, action_digest: Digest) -> bytes | None: ...

    async def put(self, action_digest: Digest, data: bytes) -> None: ...


class MemoryActionCache:
    """An in-memory ``ActionCache``, LRU-bounded by the bytes of its entries."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes: {max_bytes} must be positive")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Digest, bytes] = OrderedDict()
        self._bytes = 0

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


class _TooLarge(Exception):
    """An entry too large to read on the event loop."""


class FilesystemActionCache:
    """An ``ActionCache`` of files ``<path>/<hash[:2]>/<hash>-<size>``.

    Each ``put`` writes ``<path>/tmp/<random>`` and renames it over the entry,
    so a reader sees the old or the new entry, never a partial one, and a
    crash leaves at most a temp file (removed by ``open``). ``fsync`` as for
    ``FilesystemStore``. Entries are small and not evicted. A disk full on
    ``put`` raises ``ResourceExhausted``; an unreadable entry reads as absent.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: Literal["never", "always"] = "never",
        thread_limiter: trio.CapacityLimiter | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.fsync = fsync == "always"
        self._limiter = thread_limiter or trio.CapacityLimiter(2)

    async def open(self) -> None:
        """Create the directories and remove temp files left by a crash."""
        await self._run(self._prepare)

    async def get(self, action_digest: Digest) -> bytes | None:
        # Entries are usually well under INLINE_BYTES (see lre/cas/_inline.py)
        # and are read on the event loop; a larger one (a result listing
        # thousands of outputs) is read again in a thread.
        path = self._entry_path(action_digest)
        try:
            return await call_inline(self._read, path, INLINE_BYTES)
        except _TooLarge:
            return await self._run(self._read, path, None)

    async def put(self, action_digest: Digest, data: bytes) -> None:
        path = self._entry_path(action_digest)
        if self.fsync or len(data) > INLINE_BYTES:
            await self._run(self._write, path, data, action_digest)
        else:
            await call_inline(self._write, path, data, action_digest)

    async def usage(self) -> ContentUsage:
        """The entries on disk and their bytes, counted without changing
        anything (safe while a server uses the cache). ``OSError``s other
        than a missing directory propagate."""
        return await self._run(self._walk_entries, False)

    async def clear(self) -> ContentUsage:
        """Delete every entry and leftover temp file; returns what was
        deleted. Meant for a cache no server has open (``lre cache clean``):
        a concurrent ``put`` may survive. ``OSError``s other than a file
        already gone propagate."""
        return await self._run(self._walk_entries, True)

    def _walk_entries(self, delete: bool) -> ContentUsage:
        count = stored = 0
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
                        st = item.stat(follow_symlinks=False)
                        if delete:
                            os.unlink(item.path)
                    except FileNotFoundError:
                        continue
                    count += 1
                    stored += st.st_size
        if delete and os.path.isdir(self.path):
            self._prepare()
        return ContentUsage(count, stored)

    def _entry_path(self, digest: Digest) -> str:
        return f"{self.path}/{digest.hash[:2]}/{digest.hash}-{digest.size_bytes}"

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def _prepare(self) -> None:
        os.makedirs(f"{self.path}/tmp", mode=0o700, exist_ok=True)
        with os.scandir(f"{self.path}/tmp") as leftovers:
            for item in leftovers:
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(item.path)

    @staticmethod
    def _read(path: str, limit: int | None) -> bytes | None:
        """The entry at ``path``, None when absent; raises ``_TooLarge``
        (reading nothing) when it holds more than ``limit`` bytes."""
        try:
            with open(path, "rb") as f:
                if limit is not None and os.fstat(f.fileno()).st_size > limit:
                    raise _TooLarge
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _write(self, path: str, data: bytes, digest: Digest) -> None:
        os.makedirs(f"{self.path}/tmp", mode=0o700, exist_ok=True)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        temp = f"{self.path}/tmp/{secrets.token_hex(12)}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, path)
        except OSError as error:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ResourceExhausted(
                    f"action cache: no space left on its device while storing the result "
                    f"of {digest}"
                ) from None
            raise
