"""Directory trees in the CAS: name validation, walking and measuring.

The same rules serve the CAS (``ActionResultCache``, GetTree) and the worker
(staging inputs): a ``Directory`` whose entry names are empty, ``.``, ``..``,
contain ``/`` or NUL, repeat, or are not sorted is refused with
``InvalidArgument`` naming the directory and the name; so is a name longer
than ``NAME_MAX`` bytes, which no filesystem could stage. ``tree_extent``
measures a tree as it would be staged (shared subtrees expanded) from its
distinct messages, without recursion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.proto import re_pb2

#: Longest name of one directory entry (Linux, and most filesystems).
NAME_MAX = 255


def _check_name(where: str, kind: str, name: str) -> None:
    if not name:
        raise InvalidArgument(f"{where}: a {kind} has an empty name")
    if name in (".", ".."):
        raise InvalidArgument(f"{where}: {kind} name {name!r} is not allowed")
    if "/" in name or "\0" in name:
        raise InvalidArgument(f"{where}: {kind} name {name!r} contains '/' or NUL")
    if len(name) > NAME_MAX // 4 and len(name.encode()) > NAME_MAX:
        raise InvalidArgument(
            f"{where}: {kind} name {name[:40]!r}... is {len(name.encode())} bytes, over the "
            f"{NAME_MAX} a filesystem allows"
        )


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


@dataclass(frozen=True, slots=True)
class TreeExtent:
    """The size of a Directory tree as it would be staged: ``depth`` in
    directory levels below the root (a root with no subdirectory is 0),
    ``entries`` (files, symlinks and directories, the root not counted) and
    ``directories`` (the root counted), every subtree counted as often as
    it is named. Each figure is capped at ``cap`` (+1 means "over")."""

    depth: int
    entries: int
    directories: int


#: ``tree_extent``'s memo: extents of directories already measured, by
#: (hash, size), valid for one ``cap`` (a Directory's extent never changes).
ExtentMemo = dict[tuple[str, int], TreeExtent]


def tree_extent(
    directories: Mapping[Digest, re_pb2.Directory],
    root: Digest,
    cap: int,
    known: ExtentMemo | None = None,
) -> TreeExtent:
    """The ``TreeExtent`` of ``root``, computed over the distinct messages of
    ``directories`` (as ``DirectoryReader.read_tree`` returns them) without
    expanding shared subtrees, and without recursion: a DAG of a few KB that
    expands to millions of directories costs one visit per message.

    Figures are capped at ``cap + 1`` so they stay small. A subdirectory
    absent from ``directories`` (not read: below ``max_levels``) counts as
    an empty directory. ``known`` (kept by the caller across calls with the
    same ``cap``) saves measuring again the subtrees a build's actions
    share; only directories measured whole go into it, never one with an
    unread directory below it, so a later tree holding that one whole is
    measured whole.
    """
    over = cap + 1
    memo: ExtentMemo = known if known is not None else {}
    partial: ExtentMemo = {}  # measured with something unread below: this call only
    messages = {(d.hash, d.size_bytes): m for d, m in directories.items()}
    empty = TreeExtent(0, 0, 1)
    root_key = (root.hash, root.size_bytes)
    stack: list[tuple[tuple[str, int], bool]] = [(root_key, False)]
    while stack:
        key, children_done = stack.pop()
        if key in memo or key in partial:
            continue
        directory = messages.get(key)
        if directory is None:
            continue  # not read: empty here, and never remembered
        children = [(n.digest.hash, n.digest.size_bytes) for n in directory.directories]
        if not children_done:
            stack.append((key, True))
            stack.extend(
                (child, False)
                for child in dict.fromkeys(children)
                if child not in memo and child not in partial
            )
            continue
        depth = 0
        entries = len(directory.files) + len(directory.symlinks) + len(children)
        count = 1
        whole = True
        for child in children:
            extent = memo.get(child)
            if extent is None:
                whole = False  # unread (or in a cycle, which no digest can make)
                extent = partial.get(child, empty)
            depth = max(depth, extent.depth + 1)
            entries += extent.entries
            count += extent.directories
        measured = TreeExtent(min(depth, over), min(entries, over), min(count, over))
        (memo if whole else partial)[key] = measured
    return memo.get(root_key) or partial.get(root_key, empty)


_ENTRY_KINDS = {1: "file", 2: "directory", 3: "symlink"}


def _fields(data: bytes) -> list[tuple[int, bytes | None]]:
    """The (field number, payload) pairs of a protobuf message's wire bytes;
    payload None for fields that are not length-delimited. Raises
    ``ValueError`` on bytes that are not the wire format."""

    def varint(position: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if position >= len(data) or shift > 63:
                raise ValueError("truncated varint")
            byte = data[position]
            value |= (byte & 0x7F) << shift
            position += 1
            shift += 7
            if not byte & 0x80:
                return value, position

    fields: list[tuple[int, bytes | None]] = []
    position = 0
    while position < len(data):
        tag, position = varint(position)
        number, kind = tag >> 3, tag & 7
        if kind == 0:
            _, position = varint(position)
            fields.append((number, None))
        elif kind == 1 or kind == 5:
            position += 8 if kind == 1 else 4
            fields.append((number, None))
        elif kind == 2:
            length, position = varint(position)
            fields.append((number, data[position : position + length]))
            position += length
        else:
            raise ValueError(f"wire type {kind}")
    return fields


def non_utf8_entry(data: bytes) -> str | None:
    """For the wire bytes of a ``Directory`` that do not parse, a description
    of the first entry whose name or symlink target is not UTF-8 (bytes
    shown as ``\\xNN``), e.g. ``"file name 'a\\xffb'"``; None when there is
    none (or the bytes are not the wire format at all)."""
    try:
        for number, payload in _fields(data):
            kind = _ENTRY_KINDS.get(number)
            if kind is None or payload is None:
                continue
            for inner, value in _fields(payload):
                if value is None or inner not in (1, 2) or (inner == 2 and kind != "symlink"):
                    continue
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    what = "name" if inner == 1 else "target"
                    return f"{kind} {what} '{value.decode('utf-8', 'backslashreplace')}'"
    except ValueError:
        return None
    return None
