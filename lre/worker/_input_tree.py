"""Fetching and validating an action's input tree.

``fetch_input_tree(store, root_digest)`` reads the root ``Directory`` and
every directory below it from the CAS, one tree level at a time with all
reads of a level in flight together, validates each one, and returns a flat
``InputTree`` plan that staging turns into files on disk. With a
``DirectoryCache`` (of validated messages only), directories met in earlier actions (a build's
actions share most of theirs: toolchain, headers, output tree) are neither
read nor validated again; a Directory is content-addressed, so a cached one
is never stale.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio
from google.protobuf.message import DecodeError

from lre.cas import BlobStore, DirectoryCache, validate_directory
from lre.digest import Digest
from lre.errors import InvalidArgument, MissingBlobs, NotFound
from lre.proto import re_pb2


@dataclass(frozen=True, slots=True)
class InputFile:
    path: str  # relative to the input root, "/"-separated
    digest: Digest
    executable: bool


@dataclass(frozen=True, slots=True)
class InputSymlink:
    path: str
    target: str


@dataclass(slots=True)
class InputTree:
    """Everything below an input root, parents before children."""

    directories: list[str] = field(default_factory=list)  # relative paths, root excluded
    files: list[InputFile] = field(default_factory=list)
    symlinks: list[InputSymlink] = field(default_factory=list)
    directory_count: int = 0


def check_symlink_target(path: str, target: str, *, allow_escaping: bool) -> None:
    """Refuse a symlink at ``path`` (relative to the root) whose target is
    absolute or climbs out of the root, unless ``allow_escaping``.

    Raises ``InvalidArgument`` naming the path and target.
    """
    if target == "" or "\x00" in target:
        raise InvalidArgument(f"input symlink {path!r}: target {target!r} is empty or has NUL")
    if allow_escaping:
        return
    if target.startswith("/"):
        raise InvalidArgument(
            f"input symlink {path!r}: absolute target {target!r} is refused "
            "(symlink_policy is reject)"
        )
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if joined == ".." or joined.startswith("../"):
        raise InvalidArgument(
            f"input symlink {path!r}: target {target!r} points outside the input root "
            "(symlink_policy is reject)"
        )


#: Symlinks the kernel follows in one path lookup before it gives up (ELOOP).
_MAX_HOPS = 40


def check_symlinks_resolve(tree: InputTree) -> None:
    """Refuse a symlink whose resolution leaves the input root.

    Each symlink is resolved against the staged tree as the kernel would:
    component by component, following symlinks met on the way (chains,
    links to links, a link followed by ``..``), with ``..`` applied to where
    the walk actually is rather than to the text. A component the tree does
    not have (the action may make it) ends the walk; the rest is then judged
    by its text. A lookup the kernel would fail (a loop, a file used as a
    directory) is not an escape.

    Raises ``InvalidArgument`` naming the symlink and its target.
    """
    links = {link.path: link.target for link in tree.symlinks}
    directories = set(tree.directories)
    files = {f.path for f in tree.files}
    for path, target in links.items():
        if _escapes(path, links, directories, files):
            raise InvalidArgument(
                f"input symlink {path!r}: target {target!r} resolves outside the input root "
                "(symlink_policy is reject)"
            )


def _escapes(path: str, links: dict[str, str], directories: set[str], files: set[str]) -> bool:
    current = path.split("/")[:-1]  # the link's own directory (real directories)
    pending = links[path].split("/")
    hops = 1
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not current:
                return True
            current.pop()
            continue
        candidate = "/".join([*current, part])
        target = links.get(candidate)
        if target is not None:
            hops += 1
            if hops > _MAX_HOPS or target.startswith("/"):
                return hops <= _MAX_HOPS  # absolute: escapes; a loop: the kernel refuses
            pending = target.split("/") + pending
        elif candidate in directories:
            current.append(part)
        elif candidate in files:
            return False  # a file: the end, or ENOTDIR if more follows
        else:
            # Not in the tree: what follows is judged by its text.
            depth = len(current) + 1
            for rest in pending:
                if rest == "..":
                    depth -= 1
                    if depth < 0:
                        return True
                elif rest not in ("", "."):
                    depth += 1
            return False
    return False


async def read_blob(store: BlobStore, digest: Digest) -> bytes:
    """The whole content of a (small) blob. Raises ``NotFound`` when absent."""
    parts = [chunk async for chunk in store.read(digest)]
    return b"".join(parts)


async def fetch_directories(store: BlobStore, digests: Sequence[Digest]) -> dict[Digest, bytes]:
    """Read several Directory blobs concurrently.

    Raises ``MissingBlobs`` listing every digest that is absent.
    """
    found: dict[Digest, bytes] = {}
    missing: list[Digest] = []

    async def one(digest: Digest) -> None:
        try:
            found[digest] = await read_blob(store, digest)
        except NotFound:
            missing.append(digest)

    if len(digests) == 1:
        await one(digests[0])
    else:
        async with trio.open_nursery() as nursery:
            for digest in digests:
                nursery.start_soon(one, digest)
    if missing:
        raise MissingBlobs([d.subject for d in sorted(missing)])
    return found


async def fetch_input_tree(
    store: BlobStore,
    root_digest: Digest,
    *,
    allow_escaping_symlinks: bool = False,
    cache: DirectoryCache | None = None,
) -> InputTree:
    """Read and validate the whole input tree under ``root_digest``
    (directories found in ``cache`` are taken from it; those read are added
    once validated, so it holds validated messages only).

    Raises ``MissingBlobs`` when a Directory blob is absent,
    ``InvalidArgument`` when a blob does not parse as a Directory, a name is
    invalid (see ``lre.cas.validate_directory``) or a symlink escapes the root,
    by its text (``check_symlink_target``) or by where it resolves
    (``check_symlinks_resolve``).
    """
    tree = InputTree()
    parsed: dict[Digest, re_pb2.Directory] = {}
    level: list[tuple[str, Digest]] = [("", root_digest)]
    while level:
        if cache is not None:
            for _, digest in level:
                if digest not in parsed:
                    known = cache.get(digest)
                    if known is not None:
                        parsed[digest] = known
        wanted = sorted({digest for _, digest in level if digest not in parsed})
        if wanted:
            blobs = await fetch_directories(store, wanted)
            for digest in wanted:
                directory = re_pb2.Directory()
                try:
                    directory.ParseFromString(blobs[digest])
                except DecodeError:
                    raise InvalidArgument(
                        f"input Directory {digest}: blob does not parse as a Directory"
                    ) from None
                validate_directory(directory, digest)
                parsed[digest] = directory
                if cache is not None:
                    cache.put(digest, directory)
        next_level: list[tuple[str, Digest]] = []
        for prefix, digest in level:
            directory = parsed[digest]
            tree.directory_count += 1
            for file_node in directory.files:
                # validate_directory already checked every entry digest.
                node_digest = file_node.digest
                tree.files.append(
                    InputFile(
                        prefix + file_node.name,
                        Digest(node_digest.hash, node_digest.size_bytes),
                        file_node.is_executable,
                    )
                )
            for link in directory.symlinks:
                path = prefix + link.name
                check_symlink_target(path, link.target, allow_escaping=allow_escaping_symlinks)
                tree.symlinks.append(InputSymlink(path, link.target))
            for dir_node in directory.directories:
                path = prefix + dir_node.name
                tree.directories.append(path)
                child = dir_node.digest
                next_level.append((path + "/", Digest(child.hash, child.size_bytes)))
        level = next_level
    if tree.symlinks and not allow_escaping_symlinks:
        check_symlinks_resolve(tree)
    return tree
