"""Fetching and validating an action's input tree.

``fetch_input_tree(reader, root_digest)`` takes the root ``Directory`` and
every directory below it from a ``lre.cas.DirectoryReader`` (which reads and
validates each one once per process: a build's actions share most of theirs,
and the scheduler has usually read them already while checking the action's
inputs are present) and returns a flat ``InputTree`` plan that staging turns
into files on disk.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from lre.cas import DirectoryReader, TreeExtent, tree_extent
from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.worker.outputs import ActionLimits


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


#: Directories whose extent ``fetch_input_tree`` remembers at most.
MAX_REMEMBERED_EXTENTS = 1 << 18

#: Longest path below an input root: PATH_MAX (4096) less room for the
#: action directory lre stages it in and a name below it.
MAX_PATH_BYTES = 3584

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


async def fetch_input_tree(
    reader: DirectoryReader,
    root_digest: Digest,
    *,
    allow_escaping_symlinks: bool = False,
    limits: ActionLimits | None = None,
    extents: dict[tuple[str, int], TreeExtent] | None = None,
) -> InputTree:
    """The whole input tree under ``root_digest`` as a staging plan, its
    Directory messages from ``reader`` (read and validated once per process).

    Before the plan is made (shared subtrees expanded), the tree is measured
    from its distinct messages, reading at most ``max_tree_depth`` + 1
    levels: over one of ``limits`` it is refused with ``InvalidArgument``
    naming the limit's config key. ``extents`` (kept by the caller for one
    ``limits``) remembers the subtrees measured before; it is emptied when
    it holds more than ``MAX_REMEMBERED_EXTENTS``.

    Raises ``MissingBlobs`` when a Directory blob is absent,
    ``InvalidArgument`` when a blob does not parse as a Directory, a name is
    invalid (see ``lre.cas.validate_directory``), the tree is over a limit,
    or a symlink escapes the root, by its text (``check_symlink_target``) or
    by where it resolves (``check_symlinks_resolve``).
    """
    limits = limits if limits is not None else ActionLimits()
    parsed = await reader.read_tree(root_digest, max_levels=limits.max_tree_depth + 1)
    if extents is not None and len(extents) > MAX_REMEMBERED_EXTENTS:
        extents.clear()
    extent = tree_extent(parsed, root_digest, limits.tree_cap, extents)
    limits.check_extent(extent, f"input tree {root_digest}")
    tree = InputTree()
    level: list[tuple[str, Digest]] = [("", root_digest)]
    while level:
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
                if len(path) > MAX_PATH_BYTES // 4 and len(path.encode()) > MAX_PATH_BYTES:
                    raise InvalidArgument(
                        f"input directory {path[:60]!r}... is {len(path.encode())} bytes long, "
                        f"over the {MAX_PATH_BYTES} an action's path may have (PATH_MAX)"
                    )
                tree.directories.append(path)
                child = dir_node.digest
                next_level.append((path + "/", Digest(child.hash, child.size_bytes)))
        level = next_level
    if tree.symlinks and not allow_escaping_symlinks:
        check_symlinks_resolve(tree)
    return tree
