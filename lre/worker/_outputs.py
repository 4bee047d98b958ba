"""Finding an action's outputs on disk and describing them.

``scan_outputs`` runs in a worker thread after the action ended. For each
requested output it looks at what exists (``lstat``, symlinks not
followed): a regular file becomes an output file (digest, executable bit),
a directory becomes a ``Tree`` (root and deduplicated children in
topological order), a symlink stays a symlink. Missing outputs are left out.
Nothing is uploaded here; ``lre.worker._upload`` does that.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path

from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.proto import re_pb2

#: Files up to this size are kept in memory after hashing so the upload
#: does not read them again.
KEEP_IN_MEMORY = 1 << 20
_READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class OutputRequest:
    """One path the Command asked for.

    ``name`` is as the client wrote it (relative to the working directory),
    ``relative`` the same path relative to the input root, ``declared`` one
    of ``"path"`` (output_paths), ``"file"`` or ``"directory"`` (legacy).
    """

    name: str
    relative: str
    declared: str


@dataclass(frozen=True, slots=True)
class FoundFile:
    """A file to put into the CAS: its location, digest and (if small) bytes."""

    path: Path
    digest: Digest
    executable: bool
    data: bytes | None


@dataclass(slots=True)
class FoundOutputs:
    files: list[tuple[str, FoundFile]] = field(default_factory=list)
    #: name, tree digest, root directory digest
    directories: list[tuple[str, Digest, Digest]] = field(default_factory=list)
    symlinks: list[tuple[str, str, str]] = field(default_factory=list)  # name, target, kind
    #: Every file below the output directories (to be uploaded too).
    tree_files: list[FoundFile] = field(default_factory=list)
    #: Serialized Directory and Tree blobs to upload, by digest.
    blobs: dict[Digest, bytes] = field(default_factory=dict)


def hash_file(path: Path) -> tuple[Digest, bytes | None]:
    """SHA256 digest of a file, plus its bytes when it is small."""
    with open(path, "rb", buffering=0) as handle:
        data = handle.read(KEEP_IN_MEMORY + 1)
        if len(data) <= KEEP_IN_MEMORY:
            return Digest(hashlib.sha256(data).hexdigest(), len(data)), data
        hasher = hashlib.sha256(data)
        size = len(data)
        while chunk := handle.read(_READ_CHUNK):
            hasher.update(chunk)
            size += len(chunk)
    return Digest(hasher.hexdigest(), size), None


def _blob(message: re_pb2.Directory | re_pb2.Tree) -> tuple[Digest, bytes]:
    data = message.SerializeToString(deterministic=True)
    return Digest(hashlib.sha256(data).hexdigest(), len(data)), data


def _check_output_symlink(name: str, relative_link: str, target: str, allow: bool) -> None:
    if allow:
        return
    if target.startswith("/"):
        raise InvalidArgument(
            f"output {name!r} is a symlink to the absolute path {target!r}, refused "
            "(symlink_policy is reject)"
        )
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(relative_link), target))
    if joined == ".." or joined.startswith("../"):
        raise InvalidArgument(
            f"output {name!r} is a symlink to {target!r}, which leaves the input root "
            "(symlink_policy is reject)"
        )


class _TreeBuilder:
    def __init__(self, found: FoundOutputs, name: str, allow_escaping: bool) -> None:
        self.found = found
        self.name = name
        self.allow = allow_escaping
        self.directories: dict[Digest, re_pb2.Directory] = {}
        self.edges: dict[Digest, list[Digest]] = {}

    def build(self, path: Path, relative: str, shown: str) -> Digest:
        """Directory digest of ``path``; ``shown`` is its name in messages."""
        directory = re_pb2.Directory()
        children: list[Digest] = []
        with os.scandir(path) as entries:
            items = sorted(entries, key=lambda e: e.name)
        for entry in items:
            info = entry.stat(follow_symlinks=False)
            child_relative = f"{relative}/{entry.name}"
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(entry.path)
                _check_output_symlink(f"{shown}/{entry.name}", child_relative, target, self.allow)
                directory.symlinks.add(name=entry.name, target=target)
            elif stat.S_ISDIR(info.st_mode):
                child = self.build(Path(entry.path), child_relative, f"{shown}/{entry.name}")
                directory.directories.add(name=entry.name, digest=child.to_proto())
                children.append(child)
            elif stat.S_ISREG(info.st_mode):
                digest, data = hash_file(Path(entry.path))
                executable = bool(info.st_mode & stat.S_IXUSR)
                directory.files.add(
                    name=entry.name, digest=digest.to_proto(), is_executable=executable
                )
                self.found.tree_files.append(FoundFile(Path(entry.path), digest, executable, data))
            # Sockets, fifos and devices are not representable; they are left out.
        digest, data = _blob(directory)
        self.found.blobs[digest] = data
        self.directories[digest] = directory
        self.edges[digest] = children
        return digest

    def tree(self, root_digest: Digest) -> re_pb2.Tree:
        order: list[Digest] = []
        seen: set[Digest] = set()

        def visit(digest: Digest) -> None:
            for child in self.edges[digest]:
                if child not in seen:
                    seen.add(child)
                    visit(child)
            order.append(digest)

        visit(root_digest)
        order.pop()  # the root itself, last in post-order
        order.reverse()  # parents before children
        tree = re_pb2.Tree(root=self.directories[root_digest])
        tree.children.extend(self.directories[d] for d in order)
        return tree


def scan_outputs(
    root: Path, requests: list[OutputRequest], *, allow_escaping_symlinks: bool
) -> FoundOutputs:
    """Describe the requested outputs that exist under ``root``.

    Raises ``InvalidArgument`` naming the output when a symlink (an output
    itself or inside an output directory) is absolute or leaves the root
    while the symlink policy is reject. Runs blocking filesystem calls.
    """
    found = FoundOutputs()
    for request in requests:
        path = root / request.relative
        try:
            info = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(path)
            _check_output_symlink(request.name, request.relative, target, allow_escaping_symlinks)
            kind = "directory" if os.path.isdir(path) else "file"
            if request.declared != "path":
                kind = request.declared
            found.symlinks.append((request.name, target, kind))
        elif stat.S_ISREG(info.st_mode):
            digest, data = hash_file(path)
            executable = bool(info.st_mode & stat.S_IXUSR)
            found.files.append((request.name, FoundFile(path, digest, executable, data)))
        elif stat.S_ISDIR(info.st_mode):
            builder = _TreeBuilder(found, request.name, allow_escaping_symlinks)
            root_digest = builder.build(path, request.relative, request.name)
            tree = builder.tree(root_digest)
            tree_digest, tree_data = _blob(tree)
            found.blobs[tree_digest] = tree_data
            found.directories.append((request.name, tree_digest, root_digest))
    return found
