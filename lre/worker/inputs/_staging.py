"""Materialising an input tree on disk.

``stage_inputs`` turns an ``InputTree`` into real files under an action's
input root: directories first (the tree's and the parents of every output
path, reusing what a recycled root still holds: ``_skeleton.py``), then
every file (a hardlink to the CAS copy when the store can offer one,
otherwise a copy of the blob), then symlinks, then any output parent that
lies under an input file or symlink. A small tree is done in one thread
call; a tree of ``PARALLEL_FILES`` files or more has its files placed by a
few threads at once; large blobs are streamed from the store in between;
an empty tree with no output parents costs no thread at all. Inputs are
read-only (0444, or 0555 when executable); directories are 0755 so actions
can write next to their inputs. Every distinct CAS file that was linked is
recorded in ``StagingStats.links`` with a ``Snapshot`` so the worker can tell
afterwards whether the action altered it (see ``_input_guard``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import trio

from lre.cas import BlobStore, LocalFiles, call_inline, read_bytes
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import InvalidArgument, MissingBlobs, NotFound
from lre.worker.directories import plan_directories, too_long
from lre.worker.inputs._input_guard import LinkedInputs, Snapshot
from lre.worker.inputs._input_tree import InputFile, InputTree
from lre.worker.outputs import single_error_nursery

T = TypeVar("T")

#: Blobs up to this size are read into memory and written in the staging
#: thread; larger ones are streamed from the store chunk by chunk.
SMALL_BLOB = 1 << 20
#: Concurrent blob reads while staging.
READ_CONCURRENCY = 32
#: Trees with at least this many files are placed by several threads at once
#: (at most ``STAGING_THREADS``, and not more than the machine's CPUs).
PARALLEL_FILES = 512
#: Trees of at most this many files and directories are staged on the event loop.
INLINE_FILES = 8
STAGING_THREADS = 4
#: Errors of ``os.link`` after which the blob is copied instead.
_LINK_FALLBACK = frozenset((errno.EXDEV, errno.EMLINK, errno.EPERM, errno.EACCES, errno.ENOENT))


@dataclass(slots=True)
class StagingStats:
    files: int = 0
    linked: int = 0
    copied: int = 0
    bytes_copied: int = 0
    #: The CAS files that were hardlinked, as they were when linked.
    links: LinkedInputs = field(default_factory=dict)


def _mode(executable: bool) -> int:
    return 0o555 if executable else 0o444


async def stage_inputs(
    store: BlobStore,
    tree: InputTree,
    root: Path,
    *,
    output_parents: Iterable[str] = (),
    local_files: LocalFiles | None = None,
    existing: frozenset[str] = frozenset(),
    owner: tuple[int, int] | None = None,
) -> StagingStats:
    """``_stage_inputs`` (below); a path of the tree or an output parent too
    long to create under ``root`` (``ENAMETOOLONG``: deeper than
    ``PATH_MAX``) raises ``InvalidArgument`` naming it (``_long_paths``)."""
    output_parents = tuple(output_parents)
    try:
        return await _stage_inputs(
            store,
            tree,
            root,
            output_parents=output_parents,
            local_files=local_files,
            existing=existing,
            owner=owner,
        )
    except OSError as error:
        refused = too_long(error, root, output_parents)
        if refused is None:
            raise
        raise refused from None


async def _stage_inputs(
    store: BlobStore,
    tree: InputTree,
    root: Path,
    *,
    output_parents: Iterable[str] = (),
    local_files: LocalFiles | None = None,
    existing: frozenset[str] = frozenset(),
    owner: tuple[int, int] | None = None,
) -> StagingStats:
    """Create ``tree`` under ``root``, which must exist and hold nothing but
    the empty directories named in ``existing`` (relative paths, as a
    recycled action directory lists them): those the tree or an output
    parent needs are kept, the others removed (deepest first) before
    anything is placed.

    ``local_files`` (the store's blobs as files here, None: none) gives each
    blob's file of the wanted variant to hardlink: ``stored_path_for_link``
    without a checkpoint where it can (every stored variant), only the rest
    awaiting ``path_for_link``; when that raises ``NotFound`` or linking
    fails (EXDEV, EMLINK, EPERM, ...) the blob is copied from ``store``.
    Raises ``MissingBlobs`` listing every absent file blob and
    ``InvalidArgument`` when an output parent collides with an input file;
    of errors met by several threads or lanes at once, the first alone.

    ``owner`` (uid, gid): every directory made is given to it (the user the
    action runs as, who must create its outputs there); the directories in
    ``existing`` must belong to it already. Files stay lre's.
    """
    stats = StagingStats(files=len(tree.files))
    parents = [p for p in (os.path.dirname(r) for r in output_parents) if p]
    if not (tree.files or tree.directories or tree.symlinks or parents or existing):
        return stats  # an empty input root: nothing to create, no thread needed
    needed, late_parents = _needed_directories(tree, parents)
    plan = plan_directories(existing, needed)
    sources: dict[tuple[Digest, bool], str] = {}
    if local_files is not None:
        keys = []
        for key in dict.fromkeys(
            (item.digest, item.executable) for item in tree.files if item.digest != EMPTY_DIGEST
        ):
            # Most inputs of a build are stored already: a checkpoint (and
            # for larger trees a lane task) per file is the cost of asking.
            path = local_files.stored_path_for_link(*key)
            if path is None:
                keys.append(key)
            else:
                sources[key] = path

        async def look_up(key: tuple[Digest, bool]) -> None:
            try:
                sources[key] = await local_files.path_for_link(*key)
            except NotFound:
                pass  # copied below if the store can still produce it

        if len(keys) <= INLINE_FILES:
            # A filesystem store answers from its index at once (it only
            # awaits a thread to make a missing variant): lanes would cost
            # a task each and save nothing.
            for key in keys:
                await look_up(key)
        else:
            await in_lanes(keys, look_up)
    copy_digests = sorted(
        {
            f.digest
            for f in tree.files
            if (f.digest, f.executable) not in sources and f.digest != EMPTY_DIGEST
        }
    )
    if copy_digests:
        sizes = await store.has_many(copy_digests)
        missing = [d for d, size in zip(copy_digests, sizes, strict=True) if size is None]
        if missing:
            raise MissingBlobs([d.subject for d in missing])
    small = [d for d in copy_digests if d.size_bytes <= SMALL_BLOB]
    contents = await _read_many(store, small)

    base = str(root)

    def finish() -> None:
        for link in tree.symlinks:
            os.symlink(link.target, f"{base}/{link.path}")
        for parent in late_parents:
            try:
                _make_parents(base, parent, owner)
            except (FileExistsError, NotADirectoryError):
                relative = next(r for r in output_parents if os.path.dirname(r) == parent)
                raise InvalidArgument(
                    f"output path {relative!r}: its parent {parent!r} is an input file"
                ) from None

    def make_directories() -> None:
        for source, target in plan.steps:
            if source is None:
                os.mkdir(f"{base}/{target}", 0o755)
                if owner is not None:
                    os.chown(f"{base}/{target}", *owner)
            else:
                os.rename(f"{base}/{source}", f"{base}/{target}")
        for relative in plan.removals:
            os.rmdir(f"{base}/{relative}")

    def place(items: Sequence[InputFile]) -> tuple[list[InputFile], StagingStats]:
        """Link or write ``items``; returns those to stream and what was done."""
        done = StagingStats()
        later: list[InputFile] = []
        for item in items:
            target = f"{base}/{item.path}"
            key = (item.digest, item.executable)
            source = sources.get(key)
            if source is not None:
                try:
                    os.link(source, target)
                    done.linked += 1
                    if key not in done.links:
                        done.links[key] = (os.fspath(source), Snapshot.of(target))
                    continue
                except OSError as error:
                    if error.errno not in _LINK_FALLBACK:
                        raise
            if item.digest == EMPTY_DIGEST:
                data: bytes | None = b""
            else:
                data = contents.get(item.digest)
            if data is None:
                later.append(item)
                continue
            _write_file(target, data, item.executable)
            done.copied += 1
            done.bytes_copied += len(data)
        return later, done

    files = tree.files
    if len(files) < PARALLEL_FILES:

        def build() -> tuple[list[InputFile], StagingStats]:
            make_directories()
            later, done = place(files)
            if not later:
                finish()  # same thread: one thread call for the whole tree
            return later, done

        if len(files) <= INLINE_FILES and len(plan) + len(late_parents) <= INLINE_FILES:
            # A handful of links and mkdirs cost less than a thread round trip.
            later, done = await call_inline(build)
        else:
            later, done = await trio.to_thread.run_sync(build)
        results = [(later, done)]
    else:
        # Many files: directories first, then the files split over a few
        # threads (link and create calls of different threads overlap in the
        # kernel; the Python between them is short).
        await trio.to_thread.run_sync(make_directories)
        lanes = min(STAGING_THREADS, max(1, os.cpu_count() or 1))
        results = [([], StagingStats())] * lanes

        async def lane(index: int) -> None:
            results[index] = await trio.to_thread.run_sync(place, files[index::lanes])

        async with single_error_nursery() as nursery:
            for index in range(lanes):
                nursery.start_soon(lane, index)
        later = [item for part, _ in results for item in part]
    for _, done in results:
        stats.linked += done.linked
        stats.copied += done.copied
        stats.bytes_copied += done.bytes_copied
        stats.links.update(done.links)
    for item in later:
        await _stream_file(store, item, root / item.path)
        stats.copied += 1
        stats.bytes_copied += item.digest.size_bytes
    if len(files) >= PARALLEL_FILES or later:
        await trio.to_thread.run_sync(finish)
    return stats


def _make_parents(base: str, relative: str, owner: tuple[int, int] | None) -> None:
    """``os.makedirs`` of ``base/relative`` (mode 0755), each directory it
    makes given to ``owner`` (None: left lre's). Raises what mkdir raises
    (``FileExistsError`` or ``NotADirectoryError`` where a file is in the way)."""
    if owner is None:
        os.makedirs(f"{base}/{relative}", 0o755, exist_ok=True)
        return
    missing: list[str] = []
    path = relative
    while path and not os.path.isdir(f"{base}/{path}"):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        os.mkdir(f"{base}/{path}", 0o755)
        os.chown(f"{base}/{path}", *owner)


def _needed_directories(tree: InputTree, parents: Iterable[str]) -> tuple[list[str], list[str]]:
    """The directories to have before files are placed: the tree's own and
    every output parent with its ancestors, each after its parent. Output
    parents at or under an input file or symlink are returned apart, to be
    made (or refused) after the files and symlinks exist, as ``finish``
    does."""
    needed = dict.fromkeys(tree.directories)
    occupied = {item.path for item in tree.files}
    occupied.update(link.path for link in tree.symlinks)
    late: list[str] = []
    for parent in dict.fromkeys(parents):
        chain: list[str] = []
        path = parent
        while path and path not in needed:
            chain.append(path)
            path = os.path.dirname(path)
        if any(path in occupied for path in chain):
            late.append(parent)
        else:
            needed.update(dict.fromkeys(reversed(chain)))
    return list(needed), late


async def in_lanes(items: Sequence[T], work: Callable[[T], Awaitable[None]]) -> None:
    """Await ``work(item)`` for every item, ``READ_CONCURRENCY`` lanes at once.

    Each lane handles its share in turn, so thousands of cheap store calls
    cost a few dozen tasks and share each pass of the Trio scheduler
    (a task per item, or one item at a time, is several times slower).
    """
    if len(items) <= 1:
        for item in items:
            await work(item)
        return
    lanes = min(READ_CONCURRENCY, len(items))

    async def lane(start: int) -> None:
        for index in range(start, len(items), lanes):
            await work(items[index])

    async with single_error_nursery() as nursery:
        for start in range(lanes):
            nursery.start_soon(lane, start)


def _write_file(target: str | Path, data: bytes, executable: bool) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _mode(executable))
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fchmod(fd, _mode(executable))  # the umask may have dropped bits
    finally:
        os.close(fd)


async def _stream_file(store: BlobStore, item: InputFile, target: Path) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            async for chunk in store.read(item.digest):
                await trio.to_thread.run_sync(os.write, fd, chunk)
        except NotFound:
            raise MissingBlobs([item.digest.subject]) from None
    finally:
        os.close(fd)
    os.chmod(target, _mode(item.executable))


async def _read_many(store: BlobStore, digests: Sequence[Digest]) -> dict[Digest, bytes]:
    """Read small blobs with bounded concurrency; ``MissingBlobs`` if any vanished."""
    found: dict[Digest, bytes] = {}
    missing: list[Digest] = []

    async def one(digest: Digest) -> None:
        try:
            found[digest] = await read_bytes(store, digest)
        except NotFound:
            missing.append(digest)

    await in_lanes(digests, one)
    if missing:
        raise MissingBlobs([d.subject for d in sorted(missing)])
    return found
