"""Refcounted pins: blobs an action in flight needs are never evicted."""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from lre.digest import Digest


class PinTable:
    """How many live pins hold each blob (keyed by hash)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def pin(self, digests: Iterable[Digest]) -> Pin:
        """Pin ``digests`` (present or not) until the returned ``Pin`` is released."""
        hashes = tuple({d.hash for d in digests})
        counts = self._counts
        for h in hashes:
            counts[h] = counts.get(h, 0) + 1
        return Pin(self, hashes)

    def is_pinned(self, hash_hex: str) -> bool:
        return hash_hex in self._counts

    def __len__(self) -> int:
        """Number of distinct pinned blobs."""
        return len(self._counts)

    def _release(self, hashes: tuple[str, ...]) -> None:
        counts = self._counts
        for h in hashes:
            n = counts[h] - 1
            if n:
                counts[h] = n
            else:
                del counts[h]


class Pin:
    """A held pin on some blobs. ``release()`` (idempotent) or use as ``with``.

    While any pin on a blob is held the store never evicts it; a write that
    needs the space fails with ``ResourceExhausted`` instead.
    """

    __slots__ = ("_hashes", "_table")

    def __init__(self, table: PinTable, hashes: tuple[str, ...]) -> None:
        self._table: PinTable | None = table
        self._hashes = hashes

    @property
    def released(self) -> bool:
        return self._table is None

    def release(self) -> None:
        table, self._table = self._table, None
        if table is not None:
            table._release(self._hashes)

    def __enter__(self) -> Pin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __del__(self) -> None:
        # A pin dropped without release must not keep blobs forever.
        self.release()
