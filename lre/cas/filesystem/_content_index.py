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

The cache contract (docs/configuration.md): a blob lre told a client
exists (a lookup that found it, a read, an accepted write) stays for
``keep_told_s`` seconds after that last use (Bazel's
``--experimental_remote_cache_ttl`` and Buck2's ``cas_ttl_secs`` are 3 h).
Eviction never removes such a blob, nor a pinned or busy one. When those
alone exceed ``max_bytes`` the store overruns it, as long as the disk keeps
``min_free_bytes`` free (``free_disk`` measures it); the first overrun of
an episode is reported once through ``on_overrun``. The last use of each blob
is kept beside the LRU order (the order is by that time), rebuilt at
``open`` from the files' mtimes. Uses seen on another thread
(``peek_*``) are queued and count from when the owning thread applies them
(later, so never shorter); a lock makes each such lookup and the choice and
removal of victims exclusive, so a blob a peek found present is never a
victim picked before its use was queued.

Failure: ``reserve`` raises ``ResourceExhausted`` and reserves nothing when
the new bytes would leave less than ``min_free_bytes`` of the disk free (the
message names the floor), after evicting what the contract allows. Deleted blobs leave the index
before their files are unlinked (in a thread call shielded from
cancellation), so they are never served again even when the unlink fails;
its ``OSError`` then propagates (a file already gone is not an error). A
blob that is absent is never an error here: lookups answer 0 or ``None``.
"""

from __future__ import annotations

import collections
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress

import trio

from lre.cas._pins import PinTable
from lre.cas.filesystem._blob_files import unlink_all
from lre.cas.filesystem._blob_scan import EXEC_VARIANT, PLAIN_VARIANT, entry_bytes
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import ResourceExhausted

_SUFFIX = {PLAIN_VARIANT: "", EXEC_VARIANT: ".x"}
#: Uses piled up before ``touched_batch`` hands their files to a write to touch.
_TOUCH_BATCH = 4096
#: How long (seconds) one free-disk reading may stand for the disk while it is
#: far above the floor (see ``_free_disk_now``).
FREE_DISK_MAX_AGE_S = 1.0


def disk_free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


@dataclass(frozen=True, slots=True)
class ShrinkReport:
    """What ``shrink_to`` did: blobs and bytes removed, and the bytes it had to
    keep because the cache contract (or a pin) holds them."""

    evicted_blobs: int
    evicted_bytes: int
    kept_told_bytes: int


def _mark_empty_blob(hashes: Sequence[str], sizes: Sequence[int], result: list[int | None]) -> None:
    """Set ``result[i] = 0`` where digest ``i`` is the empty blob (always present)."""
    empty = EMPTY_DIGEST.hash
    if empty in hashes:
        for i, h in enumerate(hashes):
            if h == empty and sizes[i] == 0:
                result[i] = 0


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
        *,
        keep_told_s: float = 0.0,
        min_free_bytes: int = 0,
        clock: Callable[[], float] = time.time,
        free_disk: Callable[[], int] | None = None,
        on_overrun: Callable[[str], None] | None = None,
        free_disk_max_age_s: float = FREE_DISK_MAX_AGE_S,
    ) -> None:
        self.content_path = content_path
        self.max_bytes = max_bytes
        self.evict_bytes = evict_bytes
        self.keep_told_s = keep_told_s
        self.min_free_bytes = min_free_bytes
        self._clock = clock
        self._free_disk = free_disk or (lambda: disk_free_bytes(content_path))
        self._free_disk_max_age_s = free_disk_max_age_s
        #: The last free-disk reading: bytes free, when (monotonic), and
        #: ``stored_bytes`` then (lre's own writes since count against it).
        self._free_read = 0
        self._free_read_at = -math.inf
        self._free_read_stored = 0
        self._on_overrun = on_overrun
        self._overrunning = False
        self._pins = pins
        self._limiter = limiter
        self._entries: OrderedDict[str, int] = OrderedDict()
        #: Last use of each entry (``clock`` seconds), in the order of ``_entries``.
        self._used_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stored_bytes = 0
        self._reserved_bytes = 0
        self._busy: dict[str, int] = {}
        self._deleting: dict[str, trio.Event] = {}
        self._touched: set[str] = set()
        # Uses seen by ``peek_*`` on another thread, applied here (deque
        # appends and pops are safe between threads).
        self._foreign_touches: collections.deque[str] = collections.deque()
        self._evicted_blobs = 0
        self._evicted_bytes = 0

    def load(self, entries: Sequence[tuple[str, int, float]]) -> None:
        """Replace the contents with ``(hash, entry, last use)`` triples, least
        recently used first (what ``scan_content_used`` returns), even beyond
        ``max_bytes``. A last use in the future counts as now."""
        now = self._clock()
        self._entries = OrderedDict((h, entry) for h, entry, _ in entries)
        self._used_at = {h: min(used, now) for h, _, used in entries}
        self._stored_bytes = sum(map(entry_bytes, self._entries.values()))

    async def trim(self) -> None:
        """Evict down to ``max_bytes - evict_bytes`` if over ``max_bytes``
        (after ``load``), keeping what the contract holds (an overrun then)."""
        if self._stored_bytes > self.max_bytes:
            excess = self._stored_bytes - max(self.max_bytes - self.evict_bytes, 0)
            await self._evict(self._take_victims(excess) or ([], []))
            self._note_overrun("at start")

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
    def overrun_bytes(self) -> int:
        """Bytes stored or reserved beyond ``max_bytes`` (0 within it)."""
        return max(0, self._stored_bytes + self._reserved_bytes - self.max_bytes)

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
        if entry is None or entry >> 2 != digest.size_bytes:
            return 0
        return entry & 3

    def find_many(self, digests: Sequence[Digest]) -> list[int | None]:
        """The size of each digest that is stored (the empty blob always is),
        else ``None``. Each stored one counts as a use."""
        entries = self._entries
        touch = entries.move_to_end
        touched = self._touched
        used_at = self._used_at
        now = self._clock()
        result: list[int | None] = []
        append = result.append
        empty = EMPTY_DIGEST.hash
        for d in digests:
            entry = entries.get(d.hash)
            if entry is not None and entry >> 2 == d.size_bytes:
                touch(d.hash)
                touched.add(d.hash)
                used_at[d.hash] = now
                append(d.size_bytes)
            elif d.size_bytes == 0 and d.hash == empty:
                append(0)
            else:
                append(None)
        return result

    def peek_many_hashes(self, hashes: Sequence[str], sizes: Sequence[int]) -> list[int | None]:
        """``find_many_hashes`` safe to call from another thread: it only
        reads the index (one dict lookup per digest, each atomic under the
        GIL) and queues the uses, which the owning thread applies before it
        next picks eviction victims or saves access times. The lookup and the
        queueing are one step under the lock (the found hashes are queued
        in one ``extend``)."""
        entries = self._entries
        with self._lock:
            result: list[int | None] = [
                size if entry is not None and entry >> 2 == size else None
                for entry, size in zip(map(entries.get, hashes), sizes, strict=True)
            ]
            # Size 0 is falsy: the empty blob needs no use (it is always present).
            self._foreign_touches.extend(compress(hashes, result))
        _mark_empty_blob(hashes, sizes, result)
        return result

    def peek_path(self, digest: Digest) -> str | None:
        """The content file to read ``digest`` from, safe to call from another
        thread (the use is queued as in ``peek_many_hashes``); ``None`` when it
        is not stored."""
        with self._lock:
            entry = self._entries.get(digest.hash)
            if entry is None or entry >> 2 != digest.size_bytes:
                return None
            self._foreign_touches.append(digest.hash)
        return self.path(digest, PLAIN_VARIANT if entry & PLAIN_VARIANT else EXEC_VARIANT)

    def _apply_foreign_touches(self) -> None:
        touches = self._foreign_touches
        if not touches:
            return
        entries = self._entries
        used_at = self._used_at
        now = self._clock()
        while touches:
            key = touches.popleft()
            if key in entries:
                entries.move_to_end(key)
                self._touched.add(key)
                used_at[key] = now

    def touch(self, digest: Digest) -> None:
        """Count a use of a stored blob: it becomes the most recently used."""
        key = digest.hash
        if key in self._entries:
            self._entries.move_to_end(key)
            self._touched.add(key)
            self._used_at[key] = self._clock()

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
        self._used_at[key] = self._clock()
        self._touched.discard(key)

    def forget(self, digest: Digest) -> None:
        """Drop ``digest`` (its files vanished behind the store's back)."""
        with self._lock:
            entry = self._entries.pop(digest.hash, None)
        self._used_at.pop(digest.hash, None)
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

        Over ``max_bytes``, blobs the contract allows to go are evicted, least
        recently used first, down to ``max_bytes - evict_bytes``; what the
        contract, pins and adds in progress hold stays, and the store then
        overruns ``max_bytes`` (reported once per episode). Whenever the new
        bytes would leave less than ``min_free_bytes`` of the disk free,
        evictable blobs go first; if that is not enough ``ResourceExhausted``
        names the floor and nothing is reserved. Victims leave the index at
        once; their files are unlinked in a shielded thread call. Give the
        bytes back with ``unreserve`` once the blob was added or failed.
        """
        used = self._stored_bytes + self._reserved_bytes
        if used + size > self.max_bytes:
            excess = used + size - max(self.max_bytes - self.evict_bytes, 0)
            # Without a floor there is no overrun: take victims only when they
            # make room, else fail without evicting anything.
            need = None if self.min_free_bytes else used + size - self.max_bytes
            victims = self._take_victims(excess, need=need)
            if victims is None:
                raise ResourceExhausted(
                    f"filesystem store is full: blob {digest} needs {size} bytes and "
                    f"{used} of {self.max_bytes} bytes are held by pinned or busy blobs "
                    "or blobs lre told clients exist (set eviction_policy.min_free_disk "
                    "to let the store overrun max_bytes for those)"
                )
            await self._evict(victims)
        if self.min_free_bytes:
            short = self._floor_shortfall(size)
            if short > 0:
                await self._evict(self._take_victims(short) or ([], []))
                short = self._floor_shortfall(size)
            if short > 0:
                raise ResourceExhausted(
                    f"filesystem store {self.content_path}: blob {digest} needs {size} "
                    f"bytes and the disk would keep less than the free-disk floor of "
                    f"{self.min_free_bytes} bytes (eviction_policy.min_free_disk); "
                    f"{self._stored_bytes} bytes are held by blobs lre told clients exist "
                    f"in the last {self.keep_told_s:.0f} s or by running actions"
                )
        self._reserved_bytes += size
        self._note_overrun(f"while storing {digest}")

    def _floor_shortfall(self, size: int) -> int:
        """How many bytes short of ``min_free_bytes`` the disk would be after
        ``size`` more bytes and the reservations not yet written."""
        return self.min_free_bytes - (self._free_disk_now(size) - self._reserved_bytes - size)

    def _free_disk_now(self, size: int) -> int:
        """The disk's free bytes: the last reading less what this store wrote
        since, while that reading is younger than ``free_disk_max_age_s`` and
        the disk would still keep twice the floor after ``size`` more bytes
        (one ``statvfs`` then serves many writes); else a new reading. Near
        the floor every write reads the disk, so another program's writes
        are seen there; far from it they are seen within the maximum age.
        The estimate is never above the reading itself (bytes evicted since
        only offset bytes written since)."""
        written = max(0, self._stored_bytes - self._free_read_stored)
        estimate = self._free_read - written
        now = time.monotonic()
        if (
            now - self._free_read_at < self._free_disk_max_age_s
            and estimate - self._reserved_bytes - size >= 2 * self.min_free_bytes
        ):
            return estimate
        self._free_read = self._free_disk()
        self._free_read_at = now
        self._free_read_stored = self._stored_bytes
        return self._free_read

    def _note_overrun(self, when: str) -> None:
        over = self.overrun_bytes
        if not over:
            self._overrunning = False
            return
        if self._overrunning:
            return
        self._overrunning = True
        if self._on_overrun is not None:
            self._on_overrun(
                f"filesystem store {self.content_path} holds {over} bytes beyond its "
                f"max_bytes of {self.max_bytes} ({when}): the blobs lre "
                f"told clients exist in the last {self.keep_told_s:.0f} s and those of "
                "running actions may not be evicted (the cache contract); it keeps "
                f"{self.min_free_bytes} bytes of the disk free and evicts again as their "
                "time runs out"
            )

    async def shrink_to(self, target_bytes: int, *, force: bool = False) -> ShrinkReport:
        """Evict idle blobs, least recently used first, until at most
        ``target_bytes`` are stored or reserved (``max_bytes`` stays as it
        is). Blobs under the contract are kept unless ``force``; pinned and
        busy blobs are always kept, even when that leaves more than
        ``target_bytes``; unlink errors propagate as in ``reserve``."""
        before_blobs, before_bytes = self._evicted_blobs, self._evicted_bytes
        excess = self._stored_bytes + self._reserved_bytes - max(target_bytes, 0)
        victims = (self._take_victims(excess, force=force) if excess > 0 else None) or ([], [])
        if victims[0]:
            await self._evict(victims)
        else:
            await trio.lowlevel.checkpoint()
        left = self._stored_bytes + self._reserved_bytes - max(target_bytes, 0)
        return ShrinkReport(
            evicted_blobs=self._evicted_blobs - before_blobs,
            evicted_bytes=self._evicted_bytes - before_bytes,
            # Short of the target, every blob left is one eviction may not take.
            kept_told_bytes=self._stored_bytes if left > 0 else 0,
        )

    def told_bytes(self) -> int:
        """Bytes of the blobs the contract holds right now (a pass over the
        newest entries only)."""
        self._apply_foreign_touches()
        if self.keep_told_s <= 0:
            return 0
        since = self._clock() - self.keep_told_s
        held = 0
        used_at = self._used_at
        for key in reversed(self._entries):
            if used_at.get(key, 0.0) <= since:
                break
            held += entry_bytes(self._entries[key])
        return held

    def _take_victims(
        self, excess: int, *, force: bool = False, need: int | None = None
    ) -> tuple[list[str], list[str]] | None:
        """Remove from the index the least recently used idle, unpinned entries
        the contract lets go (all of them with ``force``) holding at least
        ``excess`` bytes (all of them when they hold less); their keys and
        files, to unlink with ``_evict``. With ``need``, when they hold less
        than ``need`` bytes nothing is removed and the answer is None."""
        since = self._clock() - self.keep_told_s if self.keep_told_s > 0 and not force else None
        keys: list[str] = []
        paths: list[str] = []
        freed = 0
        used_at = self._used_at
        with self._lock:
            self._apply_foreign_touches()
            for key, entry in self._entries.items():
                if freed >= excess:
                    break
                if since is not None and used_at.get(key, 0.0) > since:
                    break  # this and every later entry were used since
                if key in self._busy or self._pins.is_pinned(key):
                    continue
                keys.append(key)
                freed += entry_bytes(entry)
            if need is not None and freed < need:
                return None
            for key in keys:
                entry = self._entries.pop(key)
                paths.extend(self._paths(key, entry))
                self._stored_bytes -= entry_bytes(entry)
                self._evicted_bytes += entry_bytes(entry)
        self._evicted_blobs += len(keys)
        for key in keys:
            self._touched.discard(key)
            used_at.pop(key, None)
        return keys, paths

    async def _evict(self, victims: tuple[list[str], list[str]]) -> None:
        """Unlink the files of victims ``_take_victims`` removed."""
        keys, paths = victims
        if keys:
            await self._delete(keys, paths)

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
        if (error := self.oversize_error(digest)) is not None:
            raise error

    def reserve_now(self, digest: Digest, size: int) -> bool:
        """``reserve`` without waiting: ``False`` (nothing reserved) when it
        would evict, an unlink of ``digest`` is in progress or a batch of uses
        is due to be saved (``touched_batch``)."""
        if (
            self._stored_bytes + self._reserved_bytes + size > self.max_bytes
            or digest.hash in self._deleting
            or len(self._touched) + len(self._foreign_touches) >= _TOUCH_BATCH
            or (self.min_free_bytes and self._floor_shortfall(size) > 0)
        ):
            return False
        self._reserved_bytes += size
        return True

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
        d = Digest(key, entry >> 2)
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
