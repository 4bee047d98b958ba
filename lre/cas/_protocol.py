"""The narrow storage protocol every store implements, and helpers on top.

All methods are Trio-async and run on the Trio side of the process.
Stores compose by wrapping (``FastSlowStore(fast, slow)``,
``VerifyStore(inner)``), each holding the stores it wraps.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lre.digest import Digest

if TYPE_CHECKING:
    from lre.cas._pins import Pin


@runtime_checkable
class BlobStore(Protocol):
    """Blobs addressed by digest.

    - ``has_many`` returns, for each digest in order, the stored size or
      ``None`` when absent. The empty blob is always present.
    - ``read`` yields the bytes of ``digest`` from ``offset``, at most
      ``limit`` bytes (``None`` = to the end), in chunks. Raises
      ``lre.errors.NotFound`` naming the digest when absent and
      ``lre.errors.OutOfRange`` when ``offset`` is negative or past the size
      (``offset == size`` yields nothing). A blob being read stays readable
      to the end even if it is evicted meanwhile.
    - ``write`` consumes ``chunks`` and makes the blob visible only after
      verifying that their concatenation has exactly ``digest``'s size and
      hash; otherwise it raises ``lre.errors.InvalidArgument`` naming the
      digest and what differed, and nothing becomes visible. Raises
      ``lre.errors.ResourceExhausted`` when the store cannot hold the blob.
      Writing a blob that is already present is allowed and cheap.
    """

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]: ...

    def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]: ...

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None: ...


@runtime_checkable
class PinnableStore(BlobStore, Protocol):
    """A store whose blobs can be protected from eviction.

    ``pin(digests)`` returns a handle (``release()`` or ``with``) that keeps
    the named blobs from being evicted until released; pins are refcounted,
    and pinning an absent blob protects it once it is written.
    """

    def pin(self, digests: Iterable[Digest]) -> Pin: ...
