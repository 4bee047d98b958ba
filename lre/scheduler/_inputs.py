"""Checks that an action's Command and whole input tree are in the CAS.

Most of a build's actions share large subtrees (a toolchain, Bazel's own
``external/bazel_tools``) under roots that differ per action. A Directory's
digest fixes every digest below it, so ``SubtreeBlobs`` remembers, per
subtree already walked, the flat list of the blobs it names: the next
action's check asks the store about that list in one call instead of
reading and walking the subtree again. Whether the blobs are still stored is
asked every time, so a remembered subtree never makes a missing blob look
present.
"""

from __future__ import annotations

from collections import OrderedDict

from lre.cas import DirectoryReader
from lre.digest import EMPTY_DIGEST, Digest
from lre.proto import re_pb2

#: Subtrees naming more distinct blobs than this are walked every time.
MAX_SUBTREE_BLOBS = 20_000
#: Digests ``SubtreeBlobs`` holds over all its subtrees (about 8 bytes each).
MAX_REMEMBERED_BLOBS = 1_000_000
#: Subtrees seen once that ``SubtreeBlobs`` keeps track of (to remember those
#: seen again); forgotten all at once beyond this.
MAX_SIGHTED = 100_000


class SubtreeBlobs:
    """Per Directory digest, every distinct blob of its subtree (the
    Directory itself included), for at most ``max_blobs`` digests in all;
    the subtrees used least recently are forgotten first. Nothing here can
    go stale: a Directory's digest fixes its subtree.

    A subtree is worth a list only once a second action names it (most
    subtrees of a clean build belong to one action): ``seen_before`` keeps
    the first sightings, at most ``max_sighted`` of them."""

    def __init__(
        self, *, max_blobs: int = MAX_REMEMBERED_BLOBS, max_sighted: int = MAX_SIGHTED
    ) -> None:
        self._max_blobs = max_blobs
        self._max_sighted = max_sighted
        self._held = 0
        self._lists: OrderedDict[Digest, tuple[Digest, ...]] = OrderedDict()
        self._sighted: set[Digest] = set()

    def seen_before(self, directory: Digest) -> bool:
        """Whether ``directory`` was offered here before; notes it if not."""
        if directory in self._sighted:
            return True
        if len(self._sighted) >= self._max_sighted:
            self._sighted.clear()
        self._sighted.add(directory)
        return False

    def __len__(self) -> int:
        return len(self._lists)

    @property
    def held_blobs(self) -> int:
        """Digests held over all remembered subtrees."""
        return self._held

    def get(self, directory: Digest) -> tuple[Digest, ...] | None:
        blobs = self._lists.get(directory)
        if blobs is not None:
            self._lists.move_to_end(directory)
        return blobs

    def remember(self, directory: Digest, blobs: tuple[Digest, ...]) -> None:
        """Keep ``blobs`` as ``directory``'s; a list over ``max_blobs`` on its
        own is not kept."""
        if directory in self._lists or len(blobs) > self._max_blobs:
            return
        self._lists[directory] = blobs
        self._held += len(blobs)
        while self._held > self._max_blobs:
            _, old = self._lists.popitem(last=False)
            self._held -= len(old)


async def find_missing_inputs(
    directories: DirectoryReader,
    command_digest: Digest,
    input_root: Digest,
    subtrees: SubtreeBlobs | None = None,
) -> list[Digest]:
    """Every blob of the action's inputs that the reader's store lacks, each
    once, in the order met: the Command, then the input tree breadth first
    (Directory messages, then the files and subdirectories they name).

    A Directory that is absent is reported and not descended into. Raises
    ``InvalidArgument`` naming a Directory that does not parse or is not
    valid (the reader checks each one once, for the worker as well).

    With ``subtrees``, a subdirectory remembered there is not read or
    walked: its blobs are asked about in one call with the last level.
    Should any of them be missing, the whole tree is walked again without
    ``subtrees`` so the answer is exactly the one above. After a check that
    found nothing missing, the subtrees below the root (never the root
    itself, which differs per action) are remembered.
    """
    if subtrees is not None:
        missing, walked = await _walk(directories, command_digest, input_root, subtrees)
        if missing is None:
            return await _walk_all(directories, command_digest, input_root)
        if not missing:
            _remember(directories, input_root, walked, subtrees)
        return missing
    return await _walk_all(directories, command_digest, input_root)


async def _walk_all(
    directories: DirectoryReader, command_digest: Digest, input_root: Digest
) -> list[Digest]:
    missing, _ = await _walk(directories, command_digest, input_root, None)
    assert missing is not None
    return missing


async def _walk(
    directories: DirectoryReader,
    command_digest: Digest,
    input_root: Digest,
    subtrees: SubtreeBlobs | None,
) -> tuple[list[Digest] | None, list[Digest]]:
    """The missing blobs (None: one of a remembered subtree's, answer
    unknown) and the directories read, in the order read."""
    store = directories.store
    missing: list[Digest] = []
    seen: set[Digest] = {EMPTY_DIGEST}
    level: list[Digest] = []
    for digest in (command_digest, input_root):
        if digest not in seen:
            seen.add(digest)
            level.append(digest)
    is_directory = {input_root}
    walked: list[Digest] = []
    pending: list[Digest] = []  # blobs of remembered subtrees, not asked about yet
    while level or pending:
        sizes = await store.has_many(level + pending if pending else level)
        if pending:
            if None in sizes[len(level) :]:
                return None, walked
            sizes = sizes[: len(level)]
            pending = []
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
            walked.append(digest)
            # The reader validated every child digest.
            for file in directory.files:
                child = Digest(file.digest.hash, file.digest.size_bytes)
                if child not in seen:
                    seen.add(child)
                    level.append(child)
            for sub in directory.directories:
                child = Digest(sub.digest.hash, sub.digest.size_bytes)
                if child in seen:
                    continue
                seen.add(child)
                known = subtrees.get(child) if subtrees is not None else None
                if known is not None:
                    pending.extend(known)
                else:
                    is_directory.add(child)
                    level.append(child)
    return missing, walked


def _remember(
    directories: DirectoryReader,
    root: Digest,
    walked: list[Digest],
    subtrees: SubtreeBlobs,
) -> None:
    """Remember the blobs of every subtree read below ``root`` that an
    earlier check read too, deepest first, each built from its children's
    lists; a subtree whose message the reader no longer caches, or over
    ``MAX_SUBTREE_BLOBS``, is left out (and so is every subtree holding it)."""
    cache = directories.cache
    for digest in reversed(walked):
        if digest == root or not subtrees.seen_before(digest):
            continue
        directory = cache.get(digest)
        if directory is None:
            continue
        blobs = _subtree_list(digest, directory, subtrees)
        if blobs is not None:
            subtrees.remember(digest, blobs)


def _subtree_list(
    digest: Digest, directory: re_pb2.Directory, subtrees: SubtreeBlobs
) -> tuple[Digest, ...] | None:
    collected: dict[Digest, None] = {digest: None}
    for file in directory.files:
        collected[Digest(file.digest.hash, file.digest.size_bytes)] = None
    for sub in directory.directories:
        child_digest = Digest(sub.digest.hash, sub.digest.size_bytes)
        if child_digest == EMPTY_DIGEST:
            continue  # an empty directory: the empty blob is always present
        child = subtrees.get(child_digest)
        if child is None:
            return None
        collected.update(dict.fromkeys(child))
        if len(collected) > MAX_SUBTREE_BLOBS:
            return None
    collected.pop(EMPTY_DIGEST, None)
    if len(collected) > MAX_SUBTREE_BLOBS:
        return None
    return tuple(collected)
