"""Finding an action's outputs on disk and describing them.

``scan_outputs`` runs in a worker thread after the action ended. Everything
is reached from a descriptor of the input root, never through a symlink
(``open_beneath``): an output whose parent directory the action replaced by
a symlink is refused with ``InvalidArgument`` naming it, so nothing outside
the action directory is ever read as an output, moved or emptied. For each
requested output it looks at what exists: a regular file becomes an output
file (digest, executable bit), hashed through the one descriptor it was
opened with (``O_NONBLOCK``, so a FIFO swapped in cannot hang lre, and a
non-regular file found there is refused); a directory becomes a ``Tree``
(root and deduplicated children in topological order) read the same way; a
symlink stays a symlink. Missing outputs are left out. A file with more than
one link (``ln`` of a file from elsewhere) or owned by another user is marked
not ``movable``: it is copied into the CAS, never renamed or chmodded.
``log_file`` reads the action's stdout or stderr only if it is still the
file lre opened for it. Nothing is uploaded here; ``lre.worker._upload``
does that.
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
from lre.worker._beneath import SymlinkInPath, open_beneath

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
    """A file to put into the CAS: its location, digest and (if small) bytes.

    ``movable``: the file may be moved into the CAS (one link, lre's own
    user); otherwise it is copied. ``root``/``relative``: where to open it
    again safely (``open_beneath``) when it is too big to keep in memory;
    ``root`` None means ``path`` is lre's own file (logs).
    """

    path: Path
    digest: Digest
    executable: bool
    data: bytes | None
    movable: bool = True
    root: Path | None = None
    relative: str = ""


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
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return hash_fd(fd)
    finally:
        os.close(fd)


def hash_fd(fd: int) -> tuple[Digest, bytes | None]:
    """SHA256 digest of the file open as ``fd`` (read from offset 0), plus
    its bytes when it is small."""
    data = os.pread(fd, KEEP_IN_MEMORY + 1, 0)
    if len(data) <= KEEP_IN_MEMORY:
        return Digest(hashlib.sha256(data).hexdigest(), len(data)), data
    hasher = hashlib.sha256(data)
    size = len(data)
    while chunk := os.pread(fd, _READ_CHUNK, size):
        hasher.update(chunk)
        size += len(chunk)
    return Digest(hasher.hexdigest(), size), None


_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY


def _read_regular(
    dir_fd: int, name: str, shown: str
) -> tuple[Digest, bytes | None, os.stat_result]:
    """Hash the regular file ``name`` in ``dir_fd`` through one descriptor.

    Raises ``InvalidArgument`` naming ``shown`` when what is there now is not
    a regular file (swapped since it was listed).
    """
    fd = _open_listed(dir_fd, name, _FILE_FLAGS, shown)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"output {shown!r} is no longer a regular file")
        digest, data = hash_fd(fd)
    finally:
        os.close(fd)
    return digest, data, info


def _open_listed(dir_fd: int, name: str, flags: int, shown: str) -> int:
    """Open ``name``, just listed in ``dir_fd``, without following a link.

    Raises ``InvalidArgument`` naming ``shown`` when it cannot be opened so
    (removed, or swapped for a symlink or another kind of file since).
    """
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        raise InvalidArgument(
            f"output {shown!r} changed while it was collected ({error.strerror})"
        ) from None


def _movable(info: os.stat_result) -> bool:
    return info.st_nlink == 1 and info.st_uid == os.geteuid()


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
    def __init__(self, found: FoundOutputs, name: str, allow_escaping: bool, root: Path) -> None:
        self.found = found
        self.name = name
        self.allow = allow_escaping
        self.root = root
        self.directories: dict[Digest, re_pb2.Directory] = {}
        self.edges: dict[Digest, list[Digest]] = {}

    def build(self, dir_fd: int, relative: str, shown: str) -> Digest:
        """Directory digest of the directory open as ``dir_fd`` (its path
        ``relative`` to the input root); ``shown`` is its name in messages."""
        directory = re_pb2.Directory()
        children: list[Digest] = []
        with os.scandir(dir_fd) as entries:
            items = sorted(entries, key=lambda e: e.name)
        for entry in items:
            info = entry.stat(follow_symlinks=False)
            child_relative = f"{relative}/{entry.name}"
            child_shown = f"{shown}/{entry.name}"
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(entry.name, dir_fd=dir_fd)
                _check_output_symlink(child_shown, child_relative, target, self.allow)
                directory.symlinks.add(name=entry.name, target=target)
            elif stat.S_ISDIR(info.st_mode):
                try:
                    child_fd = os.open(
                        entry.name, _DIR_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
                    )
                except OSError as error:
                    raise InvalidArgument(
                        f"output {child_shown!r} changed while it was collected ({error.strerror})"
                    ) from None
                try:
                    child = self.build(child_fd, child_relative, child_shown)
                finally:
                    os.close(child_fd)
                directory.directories.add(name=entry.name, digest=child.to_proto())
                children.append(child)
            elif stat.S_ISREG(info.st_mode):
                digest, data, opened = _read_regular(dir_fd, entry.name, child_shown)
                executable = bool(opened.st_mode & stat.S_IXUSR)
                directory.files.add(
                    name=entry.name, digest=digest.to_proto(), is_executable=executable
                )
                self.found.tree_files.append(
                    FoundFile(
                        self.root / child_relative,
                        digest,
                        executable,
                        data,
                        movable=_movable(opened),
                        root=self.root,
                        relative=child_relative,
                    )
                )
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

    Raises ``InvalidArgument`` naming the output when a parent directory of
    it is a symlink, when it changed while being read, or when a symlink (an
    output itself or inside an output directory) is absolute or leaves the
    root while the symlink policy is reject. Runs blocking filesystem calls.
    """
    found = FoundOutputs()
    root_fd = os.open(root, _DIR_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for request in requests:
            _scan_one(found, root, root_fd, request, allow_escaping_symlinks)
    finally:
        os.close(root_fd)
    return found


def _scan_one(
    found: FoundOutputs, root: Path, root_fd: int, request: OutputRequest, allow: bool
) -> None:
    parent, _, leaf = request.relative.rpartition("/")
    try:
        parent_fd = open_beneath(root_fd, parent, _DIR_FLAGS)
    except SymlinkInPath:
        raise InvalidArgument(
            f"output {request.name!r}: a directory on its path was replaced by a symlink; "
            "outputs are collected only beneath the input root, without following links"
        ) from None
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        try:
            info = os.stat(leaf, dir_fd=parent_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(leaf, dir_fd=parent_fd)
            _check_output_symlink(request.name, request.relative, target, allow)
            kind = request.declared
            if kind == "path":
                # Only the kind of what it points at is looked up (metadata;
                # nothing is opened through the link).
                try:
                    pointed = os.stat(leaf, dir_fd=parent_fd)
                    kind = "directory" if stat.S_ISDIR(pointed.st_mode) else "file"
                except OSError:
                    kind = "file"
            found.symlinks.append((request.name, target, kind))
        elif stat.S_ISREG(info.st_mode):
            digest, data, opened = _read_regular(parent_fd, leaf, request.name)
            executable = bool(opened.st_mode & stat.S_IXUSR)
            item = FoundFile(
                root / request.relative,
                digest,
                executable,
                data,
                movable=_movable(opened),
                root=root,
                relative=request.relative,
            )
            found.files.append((request.name, item))
        elif stat.S_ISDIR(info.st_mode):
            dir_fd = _open_listed(parent_fd, leaf, _DIR_FLAGS, request.name)
            try:
                builder = _TreeBuilder(found, request.name, allow, root)
                root_digest = builder.build(dir_fd, request.relative, request.name)
            finally:
                os.close(dir_fd)
            tree = builder.tree(root_digest)
            tree_digest, tree_data = _blob(tree)
            found.blobs[tree_digest] = tree_data
            found.directories.append((request.name, tree_digest, root_digest))
    finally:
        if parent_fd != root_fd:
            os.close(parent_fd)


def log_file(path: Path, identity: tuple[int, int]) -> FoundFile:
    """Hash the action's stdout or stderr file, the very one lre opened for it.

    Raises ``InvalidArgument`` when the action put another file (a link to a
    file elsewhere, a FIFO, a symlink) in its place.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise InvalidArgument(
            f"the action removed or replaced its {path.name} file ({error.strerror})"
        ) from None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != identity or not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"the action replaced its {path.name} file with another")
        digest, data = hash_fd(fd)
    finally:
        os.close(fd)
    movable = info.st_nlink == 1 and info.st_uid == os.geteuid()
    return FoundFile(path, digest, False, data, movable=movable)
