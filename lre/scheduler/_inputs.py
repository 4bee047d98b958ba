"""Checks that an action's Command and whole input tree are in the CAS."""

from __future__ import annotations

from lre.cas import DirectoryReader
from lre.digest import EMPTY_DIGEST, Digest


async def find_missing_inputs(
    directories: DirectoryReader, command_digest: Digest, input_root: Digest
) -> list[Digest]:
    """Every blob of the action's inputs that the reader's store lacks, each
    once, in the order met: the Command, then the input tree breadth first
    (Directory messages, then the files and subdirectories they name).

    A Directory that is absent is reported and not descended into. Raises
    ``InvalidArgument`` naming a Directory that does not parse or is not
    valid (the reader checks each one once, for the worker as well).
    """
    store = directories.store
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
        if not present_dirs:
            continue
        found, gone = await directories.get_many(present_dirs)
        missing.extend(gone)  # evicted between has_many and the read
        for digest in present_dirs:
            directory = found.get(digest)
            if directory is None:
                continue
            # The reader validated every child digest.
            for file in directory.files:
                child = Digest(file.digest.hash, file.digest.size_bytes)
                if child not in seen:
                    seen.add(child)
                    level.append(child)
            for sub in directory.directories:
                child = Digest(sub.digest.hash, sub.digest.size_bytes)
                if child not in seen:
                    seen.add(child)
                    is_directory.add(child)
                    level.append(child)
    return missing
