"""``DirectoryCache``: parsed ``Directory`` messages kept in memory by digest.

A Directory is content-addressed, so a cached message is never stale; what
it proves (parsed, or also validated) is up to the owner, which puts only
what it has checked. Bounded by entries and by the bytes of their blobs, the
least recently used dropped first.
"""

from __future__ import annotations

from collections import OrderedDict

from lre.digest import Digest
from lre.proto import re_pb2


class DirectoryCache:
    """At most ``max_entries`` messages whose blobs add up to at most
    ``max_bytes``; a message larger than ``max_bytes`` is not kept."""

    def __init__(self, *, max_entries: int = 20_000, max_bytes: int = 32 << 20) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._items: OrderedDict[Digest, re_pb2.Directory] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, digest: Digest) -> re_pb2.Directory | None:
        item = self._items.get(digest)
        if item is not None:
            self._items.move_to_end(digest)
        return item

    def put(self, digest: Digest, directory: re_pb2.Directory) -> None:
        if digest.size_bytes > self._max_bytes or digest in self._items:
            return
        self._items[digest] = directory
        self._bytes += digest.size_bytes
        while len(self._items) > self._max_entries or self._bytes > self._max_bytes:
            old, _ = self._items.popitem(last=False)
            self._bytes -= old.size_bytes
