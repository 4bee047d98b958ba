"""DirectoryCache: bounded by entries and by blob bytes, least recently used first."""

from __future__ import annotations

from lre.cas import DirectoryCache
from lre.digest import Digest
from lre.proto import re_pb2


def test_bounded_by_entries_and_bytes() -> None:
    cache = DirectoryCache(max_entries=2, max_bytes=100)
    digests = [Digest(f"{i:064x}", 40) for i in range(4)]
    for digest in digests[:3]:
        cache.put(digest, re_pb2.Directory())
    assert len(cache) == 2 and cache.get(digests[0]) is None  # oldest dropped
    cache.get(digests[1])  # now most recently used
    cache.put(Digest("f" * 64, 90), re_pb2.Directory())  # too many bytes with both others
    assert cache.get(digests[1]) is None and cache.get(digests[2]) is None
    assert cache.get(Digest("f" * 64, 90)) is not None
    cache.put(Digest("e" * 64, 101), re_pb2.Directory())  # larger than the whole budget
    assert cache.get(Digest("e" * 64, 101)) is None
