"""Stores that wrap other stores: ``VerifyStore`` and ``FastSlowStore``
(and ``Tiers``, the fast and slow halves it shares with ``FastSlowActionCache``).

Each builds its ``capabilities()`` from those of the stores it wraps, once,
when it is made (the wrapped stores' answers never change).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Sequence
from typing import Generic, Literal, TypeVar

from lre.cas._protocol import BlobStore, StoreCapabilities
from lre.cas._streams import closing_stream
from lre.cas._verify import BlobVerifier
from lre.digest import Digest
from lre.errors import NotFound, ResourceExhausted


class VerifyStore:
    """Checks size and/or hash of every write before ``inner`` sees the end.

    A mismatch raises ``InvalidArgument`` from inside the chunk stream, so
    ``inner`` aborts its write and nothing becomes visible. Reads and
    ``has_many`` pass through. Meant for stores that do not verify on their
    own (an upstream store); lre's local stores verify already.

    Capabilities: ``inner``'s pins, local files and lookups from any thread
    pass through (only writes are checked); no statistics of its own, and no
    immediate writes (they would reach ``inner`` without these checks; they
    go through ``write``).
    """

    def __init__(
        self, inner: BlobStore, *, verify_size: bool = True, verify_hash: bool = True
    ) -> None:
        self.inner = inner
        self.verify_size = verify_size
        self.verify_hash = verify_hash
        inner_has = inner.capabilities()
        self._capabilities = StoreCapabilities(
            pin=inner_has.pin,
            local_files=inner_has.local_files,
            immediate_reads=inner_has.immediate_reads,
        )

    def capabilities(self) -> StoreCapabilities:
        return self._capabilities

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]:
        return await self.inner.has_many(digests)

    async def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        async with closing_stream(self.inner.read(digest, offset, limit)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None:
        async with contextlib.aclosing(self._checked(digest, chunks)) as checked:
            await self.inner.write(digest, checked)

    async def _checked(
        self, digest: Digest, chunks: AsyncIterable[bytes]
    ) -> AsyncGenerator[bytes, None]:
        verifier = BlobVerifier(digest, verify_size=self.verify_size, verify_hash=self.verify_hash)
        async with closing_stream(chunks):
            async for chunk in chunks:
                verifier.update(chunk)
                yield chunk
        verifier.finish()


WritePolicy = Literal["both", "fast_only"]
_Tier = TypeVar("_Tier")


class Tiers(Generic[_Tier]):
    """A fast tier in front of a slow one; ``write_policy`` says whether a
    write goes on to ``slow`` (``"both"``) or stays in ``fast``
    (``"fast_only"``). Any other policy raises ``ValueError``."""

    def __init__(self, fast: _Tier, slow: _Tier, *, write_policy: WritePolicy = "both") -> None:
        if write_policy not in ("both", "fast_only"):
            raise ValueError(f'write_policy: {write_policy!r} is not "both" or "fast_only"')
        self.fast = fast
        self.slow = slow
        self.write_policy = write_policy


class FastSlowStore(Tiers[BlobStore]):
    """A fast local tier over a slow tier (usually upstream).

    - ``has_many`` asks ``fast`` and then ``slow`` for what ``fast`` lacks.
    - ``read``: a fast miss first copies the whole blob from ``slow`` into
      ``fast`` (verified like any write), then serves the range from
      ``fast``; if ``fast`` cannot hold it (``ResourceExhausted``) or drops it
      meanwhile, the range is streamed from ``slow`` directly. ``NotFound``
      when neither tier has it.
    - ``write``: ``write_policy="both"`` stores in ``fast`` and then copies
      from ``fast`` to ``slow``; ``"fast_only"`` stores in ``fast`` only.
      Errors of either tier propagate.

    Capabilities: ``fast``'s pins and local files; no lookups from other
    threads (a read may fill ``fast`` from ``slow``), no immediate writes (a
    write may have to reach ``slow`` too) and no statistics of its own.
    """

    def __init__(
        self, fast: BlobStore, slow: BlobStore, *, write_policy: WritePolicy = "both"
    ) -> None:
        super().__init__(fast, slow, write_policy=write_policy)
        fast_has = fast.capabilities()
        self._capabilities = StoreCapabilities(pin=fast_has.pin, local_files=fast_has.local_files)

    def capabilities(self) -> StoreCapabilities:
        return self._capabilities

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]:
        sizes = await self.fast.has_many(digests)
        missing = [i for i, size in enumerate(sizes) if size is None]
        if missing:
            slow_sizes = await self.slow.has_many([digests[i] for i in missing])
            for i, size in zip(missing, slow_sizes, strict=True):
                sizes[i] = size
        return sizes

    async def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        (present,) = await self.fast.has_many([digest])
        if present is None:
            try:
                async with closing_stream(self.slow.read(digest)) as source:
                    await self.fast.write(digest, source)
            except ResourceExhausted:
                pass
        started = False
        try:
            async with closing_stream(self.fast.read(digest, offset, limit)) as chunks:
                async for chunk in chunks:
                    started = True
                    yield chunk
            return
        except NotFound:
            if started:
                raise
        async with closing_stream(self.slow.read(digest, offset, limit)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None:
        await self.fast.write(digest, chunks)
        if self.write_policy == "both":
            async with closing_stream(self.fast.read(digest)) as copy:
                await self.slow.write(digest, copy)
