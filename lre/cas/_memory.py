"""``MemoryStore``: blobs in a bounded in-process LRU."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Sequence

import trio

from lre.cas._pins import Pin, PinTable
from lre.cas._protocol import StoreCapabilities
from lre.cas._statistics import StoreStatistics
from lre.cas._streams import closing_stream
from lre.cas._verify import BlobVerifier, check_read_range
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import NotFound, ResourceExhausted

_CHUNK = 1 << 20


#: A blob that arrives in chunks of at least this size on average is kept
#: as those chunks (no copy into one buffer); smaller chunks are joined.
_KEEP_PARTS_BYTES = 64 << 10


class _Parts:
    """A blob kept as the immutable chunks it arrived in (``len`` is its size)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: tuple[bytes | memoryview, ...], size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size

    def join(self) -> bytes:
        return b"".join(self.parts)

    def pieces(self, start: int, end: int, limit: int) -> Iterator[bytes]:
        """Copies of ``[start, end)`` in pieces of at most ``limit`` bytes."""
        position = 0
        for part in self.parts:
            part_end = position + len(part)
            if part_end > start and position < end:
                view = memoryview(part)
                lo = max(start, position) - position
                hi = min(end, part_end) - position
                for at in range(lo, hi, limit):
                    yield bytes(view[at : min(at + limit, hi)])
            position = part_end
            if position >= end:
                return


def _immutable(chunk: bytes | memoryview) -> bytes | memoryview:
    """``chunk`` if nothing can change it later, else a copy."""
    if isinstance(chunk, bytes) or (isinstance(chunk, memoryview) and isinstance(chunk.obj, bytes)):
        return chunk
    return bytes(chunk)


def _whole(data: bytes | _Parts) -> bytes:
    return data.join() if isinstance(data, _Parts) else data


class MemoryStore:
    """A ``BlobStore`` keeping blobs in memory, evicting least recently used.

    ``max_bytes`` bounds the sum of blob sizes (must be > 0). Once a write
    would exceed it, unpinned blobs are dropped, oldest use first, until the
    store is at or below ``max_bytes - evict_bytes``. A write that cannot
    fit (larger than ``max_bytes``, or everything else is pinned) raises
    ``ResourceExhausted`` and stores nothing. ``has_many``, ``read`` and
    ``write`` of a present blob count as a use. The empty blob is always
    present and takes no space.
    """

    def __init__(self, max_bytes: int, *, evict_bytes: int = 0) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes: {max_bytes} must be positive (no store is unbounded)")
        if not 0 <= evict_bytes < max_bytes:
            raise ValueError(f"evict_bytes: {evict_bytes} must be in [0, max_bytes)")
        self.max_bytes = max_bytes
        self.evict_bytes = evict_bytes
        self._blobs: OrderedDict[str, bytes | _Parts] = OrderedDict()
        self._stored_bytes = 0
        self._pins = PinTable()
        self._evicted_blobs = 0
        self._evicted_bytes = 0
        self._capabilities = StoreCapabilities(pin=self.pin, statistics=self.statistics)

    # ------------------------------------------------------------ protocol

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]:
        await trio.lowlevel.checkpoint()
        blobs = self._blobs
        touch = blobs.move_to_end
        result: list[int | None] = []
        append = result.append
        for d in digests:
            data = blobs.get(d.hash)
            if data is not None and len(data) == d.size_bytes:
                touch(d.hash)
                append(d.size_bytes)
            elif d.size_bytes == 0 and d.hash == EMPTY_DIGEST.hash:
                append(0)
            else:
                append(None)
        return result

    async def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        """Yield the requested range in chunks of at most 1 MiB.

        Raises ``NotFound`` / ``OutOfRange`` / ``InvalidArgument`` as the
        ``BlobStore`` protocol says, at the first iteration.
        """
        await trio.lowlevel.checkpoint()
        data = self._lookup(digest)
        length = check_read_range(digest, offset, limit)
        end = offset + length
        if isinstance(data, _Parts):
            for piece in data.pieces(offset, end, _CHUNK):
                yield piece
            return
        view = memoryview(data)
        for start in range(offset, end, _CHUNK):
            yield bytes(view[start : min(start + _CHUNK, end)])

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None:
        """Store ``chunks`` under ``digest`` after verifying size and hash.

        Raises ``InvalidArgument`` on a mismatch and ``ResourceExhausted``
        when the blob cannot fit; either way nothing becomes visible.
        """
        if self._present(digest):
            self._blobs.move_to_end(digest.hash)
            await trio.lowlevel.checkpoint()
            return
        if digest.size_bytes > self.max_bytes:
            raise ResourceExhausted(
                f"blob {digest} is larger than the memory store's capacity "
                f"of {self.max_bytes} bytes"
            )
        verifier = BlobVerifier(digest)
        parts: list[bytes] = []
        async with closing_stream(chunks):
            async for chunk in chunks:
                verifier.update(chunk)
                parts.append(chunk)
        verifier.finish()
        data: bytes | _Parts
        if len(parts) == 1:
            data = parts[0]
        elif digest.size_bytes >= _KEEP_PARTS_BYTES * len(parts):
            # Large chunks (ByteStream uploads): keep them, saving a copy of
            # the whole blob into fresh memory.
            data = _Parts(tuple(map(_immutable, parts)), digest.size_bytes)
        else:
            data = b"".join(parts)
        if digest.size_bytes == 0 or self._present(digest):
            return
        self._make_room(digest, digest.size_bytes)
        self._blobs[digest.hash] = data
        self._stored_bytes += len(data)

    # ------------------------------------------------------------ extras

    def capabilities(self) -> StoreCapabilities:
        """Pins and statistics (its blobs are not files, and a read reorders
        the LRU, so no lookups from other threads)."""
        return self._capabilities

    def pin(self, digests: Iterable[Digest]) -> Pin:
        """Keep ``digests`` from eviction until the returned pin is released."""
        return self._pins.pin(digests)

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(
            blob_count=len(self._blobs),
            stored_bytes=self._stored_bytes,
            max_bytes=self.max_bytes,
            pinned_blobs=len(self._pins),
            evicted_blobs=self._evicted_blobs,
            evicted_bytes=self._evicted_bytes,
        )

    # ------------------------------------------------------------ internals

    def _present(self, digest: Digest) -> bool:
        data = self._blobs.get(digest.hash)
        return data is not None and len(data) == digest.size_bytes

    def _lookup(self, digest: Digest) -> bytes | _Parts:
        data = self._blobs.get(digest.hash)
        if data is not None and len(data) == digest.size_bytes:
            self._blobs.move_to_end(digest.hash)
            return data
        if digest == EMPTY_DIGEST:
            return b""
        raise NotFound(f"blob {digest} is not in the CAS")

    def _make_room(self, digest: Digest, size: int) -> None:
        if self._stored_bytes + size <= self.max_bytes:
            return
        target = self.max_bytes - self.evict_bytes - size
        victims: list[str] = []
        freed = 0
        excess = self._stored_bytes - max(target, 0)
        for key, data in self._blobs.items():
            if freed >= excess:
                break
            if self._pins.is_pinned(key):
                continue
            victims.append(key)
            freed += len(data)
        if self._stored_bytes - freed + size > self.max_bytes:
            raise ResourceExhausted(
                f"memory store is full: blob {digest} needs {size} bytes, "
                f"{self._stored_bytes} of {self.max_bytes} are held by pinned blobs "
                "or cannot be freed"
            )
        for key in victims:
            data = self._blobs.pop(key)
            self._stored_bytes -= len(data)
            self._evicted_blobs += 1
            self._evicted_bytes += len(data)
