"""``DirectoryReader``: the one way lre reads ``Directory`` trees from a CAS.

The scheduler checks that an action's whole input tree is present before
queueing it, the worker stages that tree, and the forward scheduler uploads
it to an upstream: three walks over the same messages. The composition root
builds one reader per CAS and hands it to all of them, so each Directory of
a build is read, parsed and validated (``validate_directory``) once in the
process and then served from the reader's ``DirectoryCache``, which holds
validated messages only. A Directory is content-addressed: a cached one is
never stale.

Failures: ``InvalidArgument`` naming the digest for a blob that does not
parse as a Directory or breaks the naming rules; absent blobs are returned
(``get_many``) or raised as ``MissingBlobs`` naming every absent one of a
tree level (``read_tree``).
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import DecodeError

from lre.cas._blob_io import read_blobs, read_bytes
from lre.cas._protocol import BlobStore
from lre.cas.trees._directory_cache import DirectoryCache
from lre.cas.trees._tree import non_utf8_entry, validate_directory
from lre.digest import Digest
from lre.errors import InvalidArgument, LreError, MissingBlobs, NotFound, ResourceExhausted
from lre.proto import re_pb2

#: Levels with at most this many uncached directories read them one by one
#: (small blobs are read on the event loop); larger ones in one bulk read.
_ONE_BY_ONE = 4


class DirectoryReader:
    """Validated ``Directory`` messages of ``store``, cached (see the module docstring)."""

    def __init__(self, store: BlobStore, cache: DirectoryCache | None = None) -> None:
        self.store = store
        self.cache = cache if cache is not None else DirectoryCache()

    async def get_many(
        self, digests: Sequence[Digest]
    ) -> tuple[dict[Digest, re_pb2.Directory], list[Digest]]:
        """The messages of ``digests`` that are present, and those absent (in
        the order given). Raises ``InvalidArgument`` for one that does not
        parse or is not a valid Directory."""
        found: dict[Digest, re_pb2.Directory] = {}
        unknown: dict[Digest, None] = {}  # an ordered set: a level may list thousands
        cache = self.cache
        for digest in digests:
            if digest in found or digest in unknown:
                continue
            known = cache.get(digest)
            if known is not None:
                found[digest] = known
            else:
                unknown[digest] = None
        wanted = list(unknown)
        if not wanted:
            return found, []
        missing: list[Digest] = []
        if len(wanted) <= _ONE_BY_ONE:
            for digest in wanted:
                try:
                    data = await read_bytes(self.store, digest)
                except NotFound:
                    missing.append(digest)
                    continue
                found[digest] = self._accept(digest, data)
        else:
            blobs = await read_blobs(self.store, wanted)
            for digest, blob in zip(wanted, blobs, strict=True):
                if isinstance(blob, NotFound):
                    missing.append(digest)
                elif isinstance(blob, LreError):
                    raise blob
                else:
                    found[digest] = self._accept(digest, blob)
        return found, missing

    def _accept(self, digest: Digest, data: bytes) -> re_pb2.Directory:
        directory = re_pb2.Directory()
        try:
            directory.ParseFromString(data)
        except DecodeError:
            odd = non_utf8_entry(data)
            if odd is not None:
                raise InvalidArgument(
                    f"input Directory {digest}: {odd} is not valid UTF-8 (REAPI names are UTF-8)"
                ) from None
            raise InvalidArgument(
                f"input Directory {digest}: blob does not parse as a Directory"
            ) from None
        validate_directory(directory, digest)
        self.cache.put(digest, directory)
        return directory

    async def read_tree(
        self, root: Digest, *, max_directories: int | None = None, max_levels: int | None = None
    ) -> dict[Digest, re_pb2.Directory]:
        """The distinct directories at and below ``root``, breadth first, root
        first; with ``max_levels``, only those at most that many levels below
        the root (the caller sees the tree is deeper by a directory at that
        level naming one absent from the result). Raises ``MissingBlobs``
        naming every absent directory of the first level that has one,
        ``InvalidArgument`` as ``get_many``, and ``ResourceExhausted`` when
        more than ``max_directories`` distinct directories are reachable."""
        tree: dict[Digest, re_pb2.Directory] = {}
        level = [root]
        seen = {root}
        depth = 0
        while level and (max_levels is None or depth <= max_levels):
            depth += 1
            found, missing = await self.get_many(level)
            if missing:
                raise MissingBlobs([d.subject for d in sorted(missing)])
            following: list[Digest] = []
            for digest in level:
                directory = found[digest]
                tree[digest] = directory
                for node in directory.directories:
                    # validate_directory checked every child digest.
                    child = Digest(node.digest.hash, node.digest.size_bytes)
                    if child not in seen:
                        seen.add(child)
                        following.append(child)
            if max_directories is not None and len(seen) > max_directories:
                raise ResourceExhausted(
                    f"directory tree {root} has more than {max_directories} directories"
                )
            level = following
        return tree
