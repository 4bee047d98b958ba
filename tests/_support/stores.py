"""One fake store for tests: lre's ``MemoryStore`` seen through chosen
capabilities, with chosen blobs hidden or reads failing, recording what it is
asked.

A test that needs "a store without pins", "a store offering everything" or
"a store whose reads fail" builds a ``FakeStore`` instead of writing a class
of its own. Blobs written through it land in ``inner`` (a ``MemoryStore``),
which verifies them as lre's own store does.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import Any, Literal

from lre.cas import MemoryStore, Pin, StoreCapabilities
from lre.digest import Digest
from lre.errors import Internal, NotFound

#: The capabilities a ``FakeStore`` can offer from its memory store.
Offered = Literal["pin", "statistics"]


class FakeStore:
    """A ``BlobStore`` over ``inner``.

    - ``offer``: which of the memory store's capabilities it offers (none by
      default, as an upstream store); ``pin`` records each pinned set in
      ``pinned``. ``extra`` sets other fields of ``StoreCapabilities``
      as given (``local_files=...``).
    - ``hidden``: digests answered absent; reading one raises ``NotFound``.
    - ``failing``: once set, every read raises ``Internal`` (a disk error).
    - ``asked`` counts the digests ``has_many`` was asked about; ``reads``
      lists the digests read, in order.
    """

    def __init__(
        self,
        inner: MemoryStore | None = None,
        *,
        offer: Iterable[Offered] = (),
        **extra: Any,
    ) -> None:
        self.inner = inner if inner is not None else MemoryStore(1 << 30)
        self.hidden: set[Digest] = set()
        self.failing = False
        self.asked = 0
        self.reads: list[Digest] = []
        self.pinned: list[set[Digest]] = []
        offered = set(offer)
        self._capabilities = StoreCapabilities(
            pin=self._pin if "pin" in offered else None,
            statistics=self.inner.statistics if "statistics" in offered else None,
            **extra,
        )

    def capabilities(self) -> StoreCapabilities:
        return self._capabilities

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]:
        self.asked += len(digests)
        sizes = await self.inner.has_many(digests)
        return [None if d in self.hidden else s for d, s in zip(digests, sizes, strict=True)]

    def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        """Raises ``Internal`` at once when failing; ``NotFound`` at the first
        iteration for a hidden digest."""
        if self.failing:
            raise Internal(f"cannot read {digest}")
        self.reads.append(digest)
        if digest in self.hidden:
            return self._absent(digest)
        return self.inner.read(digest, offset, limit)

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None:
        await self.inner.write(digest, chunks)

    def _pin(self, digests: Iterable[Digest]) -> Pin:
        listed = list(digests)
        self.pinned.append(set(listed))
        return self.inner.pin(listed)

    @staticmethod
    async def _absent(digest: Digest) -> AsyncIterator[bytes]:
        raise NotFound(f"blob {digest} is not in the CAS")
        yield b""  # pragma: no cover - makes this a generator
