"""The narrow storage protocol every store implements, and helpers on top.

All methods are Trio-async and run on the Trio side of the process.
Stores compose by wrapping (``FastSlowStore(fast, slow)``,
``VerifyStore(inner)``), each holding the stores it wraps.

What a store offers beyond the three blob calls (pins, statistics, files on
this machine, lookups from any thread) it says in ``capabilities()``, one
typed answer every store must give, so nothing needs to probe a store's type
or attributes. A wrapper builds its answer from the answers of the stores it
wraps and so decides, in one place, which capabilities pass through it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lre.digest import Digest

if TYPE_CHECKING:
    from lre.cas._pins import Pin
    from lre.cas._statistics import StoreStatistics


class ImmediateReads(Protocol):
    """Lookups safe to make from any thread; ``None`` means "ask the store".

    FindMissingBlobs and small ByteStream reads are most of what a build asks
    the CAS; answering them on the gRPC thread saves a hop to the Trio thread
    and back. Anything not answerable that way (``None``) takes the usual
    path, which also raises the proper errors.
    """

    def sizes_now(self, hashes: Sequence[str], sizes: Sequence[int]) -> list[int | None] | None:
        """The size of each stored digest, else ``None`` in its place."""
        ...

    def read_now(self, digest: Digest, offset: int, limit: int) -> bytes | None:
        """The bytes of a small read (``limit`` 0 = to the end)."""
        ...


class ImmediateWrites(Protocol):
    """Small writes done at once on the store's own (Trio) thread, in a plain
    call (no task of its own) that never waits; ``False`` means "use ``write``".

    A build sends every small missing blob as its own one-message ByteStream
    Write; doing it in one callback on the Trio thread saves the Trio task,
    its cancel scope and the chunk streams of ``write`` (most of a small
    Write's CPU on the Trio side). A call must never block on anything but
    the file itself: whatever would wait (eviction, an unlink in progress,
    fsync, a large blob) answers ``False`` with nothing changed.
    """

    def present_now(self, digest: Digest) -> bool:
        """Whether ``digest`` is stored (the empty blob always is); a stored
        one counts as a use, as with ``has_many``."""
        ...

    def write_now(self, digest: Digest, data: bytes) -> bool:
        """Store ``data`` under ``digest`` as ``write`` would, or ``False``
        (nothing changed) when that would mean waiting. Raises as ``write``
        (``InvalidArgument`` naming the digest on a size or hash mismatch,
        ``ResourceExhausted`` when it cannot be held)."""
        ...


class LocalFiles(Protocol):
    """A store's blobs as files on this machine, as a worker hands them to actions.

    Pin a blob (``StoreCapabilities.pin``) before asking for its path, so it
    is not evicted before it is linked.

    - ``path_for_link``: the file holding a blob's plain (0o444) or
      executable (0o555) variant, to be hardlinked; the missing variant is
      copied first. Raises ``NotFound`` when the blob is absent and
      ``ResourceExhausted`` when the new variant does not fit.
    - ``stored_path_for_link``: the same without waiting, None when that
      variant is not stored already.
    - ``adopt_file``: moves a file into the store and returns its digest;
      raises ``InvalidArgument`` (the file left in place) when it is not
      ``digest``, ``ResourceExhausted`` when it does not fit. With
      ``source_fd`` it copies the file from that descriptor instead (kernel
      copy, file left in place) and trusts ``digest`` unread: for a caller
      that hashed the file and knows nothing could change it since.
    - ``discard``: withdraws a blob whose linked file an action altered
      (False when it was not stored).
    - ``max_bytes``: the bound of the store's files; ``content_path`` and
      ``temp_path``: the directories they live in.
    """

    @property
    def content_path(self) -> str: ...

    @property
    def temp_path(self) -> str: ...

    @property
    def max_bytes(self) -> int: ...

    async def path_for_link(self, digest: Digest, executable: bool) -> str: ...

    def stored_path_for_link(self, digest: Digest, executable: bool) -> str | None: ...

    async def adopt_file(
        self,
        path: str | os.PathLike[str],
        digest: Digest | None = None,
        executable: bool = False,
        *,
        source_fd: int | None = None,
    ) -> Digest: ...

    async def discard(self, digest: Digest, executable: bool) -> bool: ...


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """What a store offers besides ``has_many``/``read``/``write``; ``None``
    (the default of each field) means "not offered".

    - ``pin(digests)``: keeps the named blobs from eviction until the
      returned ``Pin`` is released (refcounted; pinning an absent blob
      protects it once written).
    - ``statistics()``: what the store itself holds and has evicted. A
      wrapper holds nothing of its own and offers none: the stores it wraps
      are configured stores of their own and report under their own names.
    - ``local_files``: this store's blobs as files on this machine
      (``LocalFiles``: a filesystem store itself, or the fast tier under a
      wrapper): inputs can be hardlinked from it, outputs moved into it, and
      an action's view hides its directories.
    - ``immediate_reads``: lookups answerable from any thread without
      changing the store (only a filesystem store, and a wrapper that leaves
      reads alone, offer them).
    - ``immediate_writes``: small writes done at once on the store's own
      thread without a task (``ImmediateWrites``; only a filesystem store
      without fsync offers them: a wrapper that checks or copies writes
      would be bypassed).
    """

    pin: Callable[[Iterable[Digest]], Pin] | None = None
    statistics: Callable[[], StoreStatistics] | None = None
    local_files: LocalFiles | None = None
    immediate_reads: ImmediateReads | None = None
    immediate_writes: ImmediateWrites | None = None


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
    - ``capabilities`` says what else the store offers (see
      ``StoreCapabilities``); it is cheap and its answer never changes.
    """

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]: ...

    def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]: ...

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None: ...

    def capabilities(self) -> StoreCapabilities: ...
