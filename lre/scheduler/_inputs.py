"""Checks that an action's Command and whole input tree are in the CAS."""

from __future__ import annotations

from lre.cas import BlobStore, DirectoryCache, read_message
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import NotFound
from lre.proto import re_pb2


async def find_missing_inputs(
    store: BlobStore,
    command_digest: Digest,
    input_root: Digest,
    cache: DirectoryCache,
) -> list[Digest]:
    """Every blob of the action's inputs that ``store`` lacks, each once, in
    the order met: the Command, then the input tree breadth first (Directory
    messages, then the files and subdirectories they name).

    A Directory that is absent is reported and not descended into. Raises
    ``InvalidArgument`` naming a digest that is present but is not a
    Directory, or a child digest that is malformed.
    """
    missing: list[Digest] = []
    seen: set[Digest] = {EMPTY_DIGEST}
    level: list[Digest] = []
    for digest in (command_digest, input_root):
        if digest not in seen:
            seen.add(digest)
            level.append(digest)
    is_directory = {input_root}
    while level:
        sizes = await store.has_many(level)
        present_dirs: list[Digest] = []
        for digest, size in zip(level, sizes, strict=True):
            if size is None:
                missing.append(digest)
            elif digest in is_directory:
                present_dirs.append(digest)
        level = []
        for digest in present_dirs:
            directory = cache.get(digest)
            if directory is None:
                try:
                    directory = await read_message(store, digest, re_pb2.Directory)
                except NotFound:
                    missing.append(digest)  # evicted between has_many and read
                    continue
                cache.put(digest, directory)
            for file in directory.files:
                child = Digest.from_proto(file.digest, field=f"directory {digest} file {file.name}")
                if child not in seen:
                    seen.add(child)
                    level.append(child)
            for sub in directory.directories:
                child = Digest.from_proto(sub.digest, field=f"directory {digest} subdir {sub.name}")
                if child not in seen:
                    seen.add(child)
                    is_directory.add(child)
                    level.append(child)
    return missing
