"""``ContentIndex``: which blob files ``FilesystemStore`` holds, and eviction.

The index lives in memory only: for each stored blob, by hash, its size and
which variant files exist (plain, executable), in least-recently-used order.
It counts the bytes of those files plus the bytes reserved for adds in
progress against ``max_bytes``; ``reserve`` evicts unpinned, idle blobs,
oldest first, until the new bytes fit. It also names the content files
(``<hash[:2]>/<hash>-<size>`` and ``.x`` for the executable variant),
deletes them once the store is open (eviction and ``remove``; ``open``'s
scan removes damaged ones before), and remembers which blobs were used since
their access times were last saved, so the store can write those as mtimes
(what the rebuild at ``open`` orders by).

Entries are plain ints (``size << 2 | variants``, as ``scan_content``
returns them): no per-blob object, so 100k blobs cost the garbage collector
nothing.

Failure: ``reserve`` raises ``ResourceExhausted`` and reserves nothing when
pinned or busy blobs hold too many bytes. Deleted blobs leave the index
before their files are unlinked (in a thread call shielded from
cancellation), so they are never served again even when the unlink fails;
its ``OSError`` then propagates (a file already gone is not an error). A
blob that is absent is never an error here: lookups answer 0 or ``None``.
"""

from __future__ import annotations

import collections
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import trio

from lre.cas._blob_files import unlink_all
from lre.cas._blob_io import mark_empty_blob
from lre.cas._blob_scan import EXEC_VARIANT, PLAIN_VARIANT, entry_bytes
from lre.cas._pins import PinTable
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import ResourceExhausted

_SUFFIX = {PLAIN_VARIANT: "", EXEC_VARIANT: ".x"}
#: Uses piled up before ``touched_batch`` hands their files to a write to touch.
_TOUCH_BATCH = 4096


def _size(entry: int) -> int:
    return entry >> 2


class ContentIndex:
    """The blobs under ``content_path``, in LRU order, within ``max_bytes``.

    A blob counts as stored only with the size it was stored with: a digest
    with the same hash and another size is absent. ``pins`` and ``busy``
    blobs are never evicted; eviction frees down to ``max_bytes -
    evict_bytes``. Files are unlinked in threads of ``limiter``.
    """

    def __init__(
        self,
        content_path: str,
        max_bytes: int,
        evict_bytes: int,
        pins: PinTable,
        limiter: trio.CapacityLimiter,
    ) -> None:
        self.content_path = content_path
        self.max_bytes = max_bytes
        self.evict_bytes = evict_bytes
        self._pins = pins
        self._limiter = limiter
        self._entries: OrderedDict[str, int] = OrderedDict()
        self._stored_bytes = 0
        self._reserved_bytes = 0
        self._busy: dict[str, int] = {}
        self._deleting: dict[str, trio.Event] = {}
        self._touched: set[str] = set()
        # Uses seen by ``peek_many_hashes`` on another thread, applied here
        # (deque appends and pops are safe between threads).
        self._foreign_touches: collections.deque[str] = collections.deque()
        self._evicted_blobs = 0
        self._evicted_bytes = 0

    def load(self, entries: Sequence[tuple[str, int]]) -> None:
        """Replace the contents with ``(hash, entry)`` pairs, least recently used
        first (what ``scan_content`` returns), even beyond ``max_bytes``."""
        self._entries = OrderedDict(entries)
        self._stored_bytes = sum(map(entry_bytes, self._entries.values()))

    async def trim(self) -> None:
        """Evict down to ``max_bytes - evict_bytes`` if over ``max_bytes``
        (after ``load``); ``ResourceExhausted`` as in ``reserve``."""
        if self._stored_bytes > self.max_bytes:
            await self.reserve(EMPTY_DIGEST, 0)

    def path(self, digest: Digest, variant: int) -> str:
        """The content file of ``digest``'s ``variant``."""
        h = digest.hash
        return f"{self.content_path}/{h[:2]}/{h}-{digest.size_bytes}{_SUFFIX[variant]}"

    # ------------------------------------------------------------ counts

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def stored_bytes(self) -> int:
        """Bytes of all variant files."""
        return self._stored_bytes

    @property
    def reserved_bytes(self) -> int:
        """Bytes set aside by ``reserve`` and not yet given back."""
        return self._reserved_bytes

    @property
    def evicted_blobs(self) -> int:
        return self._evicted_blobs

    @property
    def evicted_bytes(self) -> int:
        return self._evicted_bytes

    # ------------------------------------------------------------ lookups

    def __contains__(self, digest: Digest) -> bool:
        return self.variants(digest) != 0

    def variants(self, digest: Digest) -> int:
        """The variant bits of ``digest``'s files; 0 when it is not stored."""
        entry = self._entries.get(digest.hash)
        if entry is None or _size(entry) != digest.size_bytes:
            return 0
        return entry & 3

    def find_many(self, digests: Sequence[Digest]) -> list[int | None]:
        """The size of each digest that is stored (the empty blob always is),
        else ``None``. Each stored one counts as a use."""
        entries = self._entries
        touch = entries.move_to_end
        touched = self._touched
        result: list[int | None] = []
        append = result.append
        empty = EMPTY_DIGEST.hash
        for d in digests:
            entry = entries.get(d.hash)
            if entry is not None and entry >> 2 == d.size_bytes:
                touch(d.hash)
                touched.add(d.hash)
                append(d.size_bytes)
            elif d.size_bytes == 0 and d.hash == empty:
                append(0)
            else:
                append(None)
        return result

    def find_many_hashes(self, hashes: Sequence[str], sizes: Sequence[int]) -> list[int | None]:
        """``find_many`` for parallel lists of hashes and sizes."""
        entries = self._entries
        found = list(map(entries.get, hashes))
        result: list[int | None] = [None] * len(found)
        touch = entries.move_to_end
        touched = self._touched
        for i, entry in enumerate(found):
            if entry is not None and entry >> 2 == sizes[i]:
                touch(hashes[i])
                touched.add(hashes[i])
                result[i] = sizes[i]
        mark_empty_blob(hashes, sizes, result)
        return result

    def peek_many_hashes(self, hashes: Sequence[str], sizes: Sequence[int]) -> list[int | None]:
        """``find_many_hashes`` safe to call from another thread: it only
        reads the index (one dict lookup per digest, each atomic under the
        GIL) and queues the uses, which the owning thread applies before it
        next picks eviction victims or saves access times."""
        entries = self._entries
        found = list(map(entries.get, hashes))
        result: list[int | None] = [None] * len(found)
        touches = self._foreign_touches
        for i, entry in enumerate(found):
            if entry is not None and entry >> 2 == sizes[i]:
                touches.append(hashes[i])
                result[i] = sizes[i]
        mark_empty_blob(hashes, sizes, result)
        return result

    def peek_path(self, digest: Digest) -> str | None:
        """The content file to read ``digest`` from, safe to call from another
        thread (the use is queued as in ``peek_many_hashes``); ``None`` when it
        is not stored."""
        entry = self._entries.get(digest.hash)
        if entry is None or _size(entry) != digest.size_bytes:
            return None
        self._foreign_touches.append(digest.hash)
        return self.path(digest, PLAIN_VARIANT if entry & PLAIN_VARIANT else EXEC_VARIANT)

    def _apply_foreign_touches(self) -> None:
        touches = self._foreign_touches
        entries = self._entries
        while touches:
            key = touches.popleft()
            if key in entries:
                entries.move_to_end(key)
                self._touched.add(key)

    def touch(self, digest: Digest) -> None:
        """Count a use of a stored blob: it becomes the most recently used."""
        key = digest.hash
        if key in self._entries:
            self._entries.move_to_end(key)
            self._touched.add(key)

    # ------------------------------------------------------------ changes

    def add(self, digest: Digest, variant: int) -> None:
        """Record that ``digest``'s ``variant`` file is now in place (a use)."""
        key = digest.hash
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = digest.size_bytes << 2 | variant
            self._stored_bytes += digest.size_bytes
        else:
            if not entry & variant:
                self._entries[key] = entry | variant
                self._stored_bytes += digest.size_bytes
            self._entries.move_to_end(key)
        self._touched.discard(key)

    def forget(self, digest: Digest) -> None:
        """Drop ``digest`` (its files vanished behind the store's back)."""
        entry = self._entries.pop(digest.hash, None)
        if entry is not None:
            self._stored_bytes -= entry_bytes(entry)
        self._touched.discard(digest.hash)

    async def remove(self, digest: Digest) -> None:
        """Drop ``digest`` at once and unlink both of its variant files."""
        self.forget(digest)
        paths = [self.path(digest, v) for v in (PLAIN_VARIANT, EXEC_VARIANT)]
        await self._delete([digest.hash], paths)

    # ------------------------------------------------------------ room

    @contextmanager
    def busy(self, digests: Sequence[Digest]) -> Iterator[None]:
        """Keep ``digests`` from eviction while an add of them is in progress."""
        counts = self._busy
        for d in digests:
            counts[d.hash] = counts.get(d.hash, 0) + 1
        try:
            yield
        finally:
            for d in digests:
                n = counts[d.hash] - 1
                if n:
                    counts[d.hash] = n
                else:
                    del counts[d.hash]

    def is_busy(self, digest: Digest) -> bool:
        return digest.hash in self._busy

    async def reserve(self, digest: Digest, size: int) -> None:
        """Set ``size`` bytes aside for ``digest``, evicting if needed.

        Victims leave the index at once; their files are unlinked in a
        shielded thread call. Raises ``ResourceExhausted`` (reserving and
        evicting nothing) when pinned or busy blobs hold too much. Give the
        bytes back with ``unreserve`` once the blob was added or failed.
        """
        used = self._stored_bytes + self._reserved_bytes
        if used + size <= self.max_bytes:
            self._reserved_bytes += size
            return
        excess = used + size - max(self.max_bytes - self.evict_bytes, 0)
        victims, freed = self._victims(excess)
        if used - freed + size > self.max_bytes:
            raise ResourceExhausted(
                f"filesystem store is full: blob {digest} needs {size} bytes and "
                f"{used - freed} of {self.max_bytes} bytes are held by pinned or busy blobs"
            )
        self._reserved_bytes += size
        try:
            await self._evict(victims)
        except BaseException:
            self._reserved_bytes -= size
            raise

    async def shrink_to(self, target_bytes: int) -> None:
        """Evict unpinned, idle blobs, least recently used first, until at
        most ``target_bytes`` are stored or reserved (``max_bytes`` stays as
        it is). Pinned and busy blobs are kept even when that leaves more
        than ``target_bytes``; unlink errors propagate as in ``reserve``."""
        excess = self._stored_bytes + self._reserved_bytes - max(target_bytes, 0)
        victims, _ = self._victims(excess) if excess > 0 else ([], 0)
        if victims:
            await self._evict(victims)
        else:
            await trio.lowlevel.checkpoint()

    def _victims(self, excess: int) -> tuple[list[tuple[str, int]], int]:
        """The least recently used unpinned, idle entries holding at least
        ``excess`` bytes (all of them when they hold less), and their bytes."""
        self._apply_foreign_touches()
        victims: list[tuple[str, int]] = []
        freed = 0
        for key, entry in self._entries.items():
            if freed >= excess:
                break
            if key in self._busy or self._pins.is_pinned(key):
                continue
            victims.append((key, entry))
            freed += entry_bytes(entry)
        return victims, freed

    async def _evict(self, victims: list[tuple[str, int]]) -> None:
        """Drop ``victims`` from the index at once and unlink their files."""
        if not victims:
            return
        paths: list[str] = []
        for key, entry in victims:
            del self._entries[key]
            self._touched.discard(key)
            self._stored_bytes -= entry_bytes(entry)
            self._evicted_blobs += 1
            self._evicted_bytes += entry_bytes(entry)
            paths.extend(self._paths(key, entry))
        await self._delete([key for key, _ in victims], paths)

    def oversize_error(self, digest: Digest) -> ResourceExhausted | None:
        """The error for ``digest`` when it is larger than the whole store (no
        eviction could make room for it), else None."""
        if digest.size_bytes <= self.max_bytes:
            return None
        return ResourceExhausted(
            f"blob {digest} is larger than the filesystem store's capacity "
            f"of {self.max_bytes} bytes"
        )

    def check_fits(self, digest: Digest) -> None:
        """Raise ``oversize_error(digest)`` if there is one."""
        error = self.oversize_error(digest)
        if error is not None:
            raise error

    def unreserve(self, size: int) -> None:
        """Give back ``size`` bytes of a ``reserve``."""
        self._reserved_bytes -= size

    async def wait_deleted(self, digest: Digest) -> None:
        """Wait until no unlink of ``digest``'s files is in progress, so a new
        file of it is not unlinked by a delete that began earlier."""
        event = self._deleting.get(digest.hash)
        while event is not None:
            await event.wait()
            event = self._deleting.get(digest.hash)

    # ------------------------------------------------------------ access times

    def touched_batch(self) -> list[str]:
        """``take_touched()`` once many uses piled up, else nothing (``[]``)."""
        self._apply_foreign_touches()
        if len(self._touched) < _TOUCH_BATCH:
            return []
        return self.take_touched()

    def take_touched(self) -> list[str]:
        """The files of the blobs used since the last call, to be touched."""
        self._apply_foreign_touches()
        paths: list[str] = []
        for key in self._touched:
            entry = self._entries.get(key)
            if entry is not None:
                paths.extend(self._paths(key, entry))
        self._touched.clear()
        return paths

    # ------------------------------------------------------------ helpers

    def _paths(self, key: str, entry: int) -> list[str]:
        d = Digest(key, _size(entry))
        return [self.path(d, v) for v in (PLAIN_VARIANT, EXEC_VARIANT) if entry & v]

    async def _delete(self, keys: list[str], paths: list[str]) -> None:
        """Unlink ``paths`` (files of ``keys``, already out of the index) in a
        shielded thread call; ``wait_deleted`` on those keys waits for it."""
        done = trio.Event()
        for key in keys:
            self._deleting[key] = done
        try:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(unlink_all, paths, limiter=self._limiter)
        finally:
            for key in keys:
                if self._deleting.get(key) is done:
                    del self._deleting[key]
            done.set()
