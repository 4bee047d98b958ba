"""CAS answers the gRPC thread can give without a hop to the Trio thread.

FindMissingBlobs and small ByteStream reads are most of what a build asks
the CAS (Bazel makes one of each per action). Handing each to Trio and back
costs two thread wake-ups, a task and GIL hand-offs, several times the
lookup itself. A store that can answer from memory and small page-cache
reads, safely from another thread, offers ``ImmediateReads``; anything it
cannot answer that way (``None``) takes the usual path, which also raises
the proper errors.

Only the filesystem store offers it (through a ``VerifyStore``, which checks
writes only). Memory, fast/slow and upstream stores go the usual way: they
change their state on reads, or need I/O that is not a page-cache read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from lre.cas._filesystem import FilesystemStore
from lre.cas._protocol import BlobStore
from lre.cas._wrappers import VerifyStore
from lre.digest import Digest


class ImmediateReads(Protocol):
    """Lookups safe to make from any thread; ``None`` means "ask the store"."""

    def sizes_now(self, hashes: Sequence[str], sizes: Sequence[int]) -> list[int | None] | None:
        """The size of each stored digest, else ``None`` in its place."""
        ...

    def read_now(self, digest: Digest, offset: int, limit: int) -> bytes | None:
        """The bytes of a small read (``limit`` 0 = to the end)."""
        ...


def immediate_reads(store: BlobStore) -> ImmediateReads | None:
    """What ``store`` can answer from any thread, if anything."""
    while isinstance(store, VerifyStore):
        store = store.inner
    if isinstance(store, FilesystemStore):
        return store
    return None
