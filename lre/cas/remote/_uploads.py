"""Copying blobs to an upstream CAS: only what it lacks, from a local store."""

from __future__ import annotations

from collections.abc import Iterable

import trio

from lre.cas._blob_io import missing_digests, read_message
from lre.cas._protocol import BlobStore
from lre.cas._streams import closing_stream
from lre.cas.action_cache._results import named_digests
from lre.cas.trees._tree import tree_file_digests
from lre.digest import Digest
from lre.errors import NotFound
from lre.proto import re_pb2


async def upload_missing(
    source: BlobStore, target: BlobStore, digests: Iterable[Digest], *, parallel: int = 16
) -> list[Digest]:
    """Copy every digest ``target`` lacks (one FindMissing round) from ``source``.

    Returns the digests copied. Raises ``NotFound`` naming a digest that
    neither store has, and whatever ``target`` raises when it fails (a
    strict ``GrpcStore`` raises ``UpstreamUnavailable``). Runs up to
    ``parallel`` copies at once; the first failure cancels the others.
    """
    missing = await missing_digests(target, digests)
    if not missing:
        return []
    limiter = trio.CapacityLimiter(parallel)

    async def copy(digest: Digest) -> None:
        async with limiter, closing_stream(source.read(digest)) as chunks:
            await target.write(digest, chunks)

    async with trio.open_nursery() as nursery:
        for digest in missing:
            nursery.start_soon(copy, digest)
    return missing


async def result_blobs(result: re_pb2.ActionResult, source: BlobStore) -> list[Digest]:
    """Every blob ``result`` references: output files, stdout/stderr, output
    ``Tree`` blobs and the files inside those trees (read from ``source``).

    Raises ``InvalidArgument`` for a malformed digest or Tree and
    ``NotFound`` for a Tree ``source`` lacks.
    """
    blobs, trees = named_digests(result)
    for tree_digest in trees:
        try:
            tree = await read_message(source, tree_digest, re_pb2.Tree)
        except NotFound:
            raise NotFound(f"output tree {tree_digest} is not in the local store") from None
        blobs.extend(tree_file_digests(tree, tree_digest))
    return list(dict.fromkeys(blobs))
