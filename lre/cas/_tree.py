"""Directory trees in the CAS: name validation and walking.

The same rules serve the CAS (``ActionResultCache``, GetTree) and the worker
(staging inputs): a ``Directory`` whose entry names are empty, ``.``, ``..``,
contain ``/`` or NUL, repeat, or are not sorted is refused with
``InvalidArgument`` naming the directory and the name.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from lre.cas._blob_io import read_message
from lre.cas._protocol import BlobStore
from lre.digest import Digest
from lre.errors import InvalidArgument, LreError, MissingBlobs, NotFound, ResourceExhausted
from lre.proto import re_pb2

#: Directory blobs fetched at once while walking one level of a tree.
_FETCH_CONCURRENCY = 16


def _check_name(where: str, kind: str, name: str) -> None:
    if not name:
        raise InvalidArgument(f"{where}: a {kind} has an empty name")
    if name in (".", ".."):
        raise InvalidArgument(f"{where}: {kind} name {name!r} is not allowed")
    if "/" in name or "\0" in name:
        raise InvalidArgument(f"{where}: {kind} name {name!r} contains '/' or NUL")


def validate_directory(directory: re_pb2.Directory, where: Digest | str) -> None:
    """Check the entries of one ``Directory``.

    ``where`` names the directory in messages (its digest, or a description
    such as ``"tree <digest> child 3"``). Raises ``InvalidArgument`` for a
    bad name, a name repeated (also across files, directories and symlinks),
    a list not sorted by name, or a malformed entry digest.
    """
    label = f"directory {where}"
    seen: set[str] = set()
    for kind, nodes in (
        ("file", directory.files),
        ("directory", directory.directories),
        ("symlink", directory.symlinks),
    ):
        previous: str | None = None
        for node in nodes:
            name = node.name
            _check_name(label, kind, name)
            if name in seen:
                raise InvalidArgument(f"{label}: name {name!r} appears more than once")
            if previous is not None and name < previous:
                raise InvalidArgument(
                    f"{label}: {kind} entries are not sorted by name ({previous!r} before {name!r})"
                )
            seen.add(name)
            previous = name
    for file_node in directory.files:
        Digest.from_proto(file_node.digest, field=f"{label}: file {file_node.name!r} digest")
    for dir_node in directory.directories:
        Digest.from_proto(dir_node.digest, field=f"{label}: directory {dir_node.name!r} digest")


def file_digests(directories: Iterable[re_pb2.Directory]) -> set[Digest]:
    """Digests of every file in ``directories`` (assumed validated)."""
    return {
        Digest(node.digest.hash, node.digest.size_bytes)
        for directory in directories
        for node in directory.files
    }


def validate_tree(tree: re_pb2.Tree, where: Digest | str) -> None:
    """Validate the root and every child ``Directory`` of an output ``Tree``."""
    validate_directory(tree.root, f"{where} (tree root)")
    for i, child in enumerate(tree.children):
        validate_directory(child, f"{where} (tree child {i})")


def tree_file_digests(tree: re_pb2.Tree, where: Digest | str) -> set[Digest]:
    """Validate ``tree`` and return the digests of all files in it."""
    validate_tree(tree, where)
    return file_digests([tree.root, *tree.children])


async def read_directory_tree(
    store: BlobStore, root: Digest, *, max_directories: int | None = None
) -> dict[Digest, re_pb2.Directory]:
    """Fetch and validate the ``Directory`` at ``root`` and all below it.

    Returns the distinct directories in breadth-first order, root first.
    Raises ``MissingBlobs`` naming every directory blob found absent (root
    included), ``InvalidArgument`` when one does not parse or breaks the
    naming rules, and ``ResourceExhausted`` when more than
    ``max_directories`` distinct directories are reachable.
    """
    found: dict[Digest, re_pb2.Directory] = {}
    level = [root]
    seen = {root}
    while level:
        fetched: dict[Digest, re_pb2.Directory] = {}
        missing: list[Digest] = []
        failures: list[LreError] = []
        limiter = trio.CapacityLimiter(_FETCH_CONCURRENCY)

        async def fetch(
            digest: Digest,
            fetched: dict[Digest, re_pb2.Directory] = fetched,
            missing: list[Digest] = missing,
            failures: list[LreError] = failures,
            limiter: trio.CapacityLimiter = limiter,
        ) -> None:
            # Errors are collected, not raised, so callers never see an ExceptionGroup.
            async with limiter:
                try:
                    fetched[digest] = await read_message(store, digest, re_pb2.Directory)
                except NotFound:
                    missing.append(digest)
                except LreError as error:
                    failures.append(error)

        if len(level) == 1:
            await fetch(level[0])
        else:
            async with trio.open_nursery() as nursery:
                for digest in level:
                    nursery.start_soon(fetch, digest)
        if missing:
            raise MissingBlobs([d.subject for d in sorted(missing)])
        if failures:
            raise failures[0]
        next_level: list[Digest] = []
        for digest in level:  # keep a deterministic order
            directory = fetched[digest]
            validate_directory(directory, digest)
            found[digest] = directory
            for node in directory.directories:
                child = Digest(node.digest.hash, node.digest.size_bytes)
                if child not in seen:
                    seen.add(child)
                    next_level.append(child)
        if max_directories is not None and len(seen) > max_directories:
            raise ResourceExhausted(
                f"directory tree {root} has more than {max_directories} directories"
            )
        level = next_level
    return found
