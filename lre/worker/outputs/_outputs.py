"""Finding an action's outputs on disk and describing them.

``scan_outputs`` runs in a worker thread after the action ended. Everything
is reached from a descriptor of the input root, one name at a time, never
through a symlink: an output whose parent directory the action replaced by
a symlink is refused with ``InvalidArgument`` naming it, so nothing outside
the action directory is ever read as an output, moved or emptied. After an
action that ran in a view the input root is read as the action saw it: the
overlay's upper layer (what it wrote) over the staged tree, merged again
by ``_layers`` (removed inputs absent, untouched ones read from the staged
tree). For each
requested output it looks at what exists: a regular file becomes an output
file (digest, executable bit), hashed through the one descriptor it was
opened with (``O_NONBLOCK``, so a FIFO swapped in cannot hang lre, and a
non-regular file found there is refused); a directory becomes a ``Tree``
(root and deduplicated children in topological order) read the same way; a
symlink stays a symlink. Before a file is read its size is charged to the
action's ``OutputBudget``, and an output directory is walked with a stack of
its own, refused as soon as it passes a tree limit (``ActionLimits``); names
and symlink targets that are not UTF-8 are refused (``_output_checks``).
Missing outputs are left out. A file with more than
one link (``ln`` of a file from elsewhere), owned by another user or found
in the staged tree (a CAS inode) is marked not ``movable``: it is copied
into the CAS, never renamed or chmodded, and is opened again at its path in
the layer it was found in; so is one whose path is longer than ``PATH_MAX``
(``_long_paths``: it is reached, and opened again, one name at a time from
directory descriptors).
``log_file`` reads the action's stdout or stderr only if it is still the
file lre opened for it. Nothing is uploaded here; ``lre.worker._upload``
does that.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.proto import re_pb2
from lre.worker.directories import SymlinkInPath, fits
from lre.worker.outputs._layers import (
    Entry,
    MergedDir,
    OverlayXattrs,
    open_listed,
    refuse_metacopy,
    walk,
)
from lre.worker.outputs._leases import holds_lease, take_lease
from lre.worker.outputs._limits import ActionLimits, tree_over_limit
from lre.worker.outputs._output_checks import OutputBudget, check_name, check_target, printable

#: Files up to this size are kept in memory after hashing so the upload
#: does not read them again.
KEEP_IN_MEMORY = 1 << 20
_READ_CHUNK = 1 << 20
#: At most this many files of one action are held open under a lease from
#: the scan to the upload (the rest are read and verified when copied).
HELD_AT_MOST = 64


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
    ``root`` None means ``path`` is lre's own file (logs). ``held``: a
    descriptor of the file under the write lease taken before it was hashed
    (see ``scan_outputs``); its owner (``upload_outputs``) closes it.
    """

    path: Path
    digest: Digest
    executable: bool
    data: bytes | None
    movable: bool = True
    root: Path | None = None
    relative: str = ""
    held: int | None = None


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


def close_held(files: Iterable[FoundFile]) -> None:
    """Close the descriptors ``files`` hold (their leases go with them)."""
    for item in files:
        if item.held is not None:
            os.close(item.held)


def hash_file(path: Path) -> tuple[Digest, bytes | None]:
    """SHA256 digest of a file, plus its bytes when it is small."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return hash_fd(fd)
    finally:
        os.close(fd)


def hash_fd(fd: int, expected: int | None = None) -> tuple[Digest, bytes | None]:
    """SHA256 digest of the file open as ``fd`` (read from offset 0), plus
    its bytes when it is small. With ``expected`` (its size when it was
    checked), a file that grew past that while being read raises
    ``InvalidArgument`` instead of being read on."""
    data = os.pread(fd, KEEP_IN_MEMORY + 1, 0)
    if len(data) <= KEEP_IN_MEMORY:
        if expected is not None and len(data) > expected:
            raise _grew(expected)
        return Digest(hashlib.sha256(data).hexdigest(), len(data)), data
    hasher = hashlib.sha256(data)
    size = len(data)
    while chunk := os.pread(fd, _READ_CHUNK, size):
        hasher.update(chunk)
        size += len(chunk)
        if expected is not None and size > expected:
            raise _grew(expected)
    return Digest(hasher.hexdigest(), size), None


def _grew(expected: int) -> InvalidArgument:
    return InvalidArgument(f"an output grew past {expected} bytes while lre read it")


_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK


def _read_regular(
    dir_fd: int,
    name: str,
    shown: str,
    budget: OutputBudget,
    *,
    upper_of_overlay: OverlayXattrs | None = None,
    holds: _Holds | None = None,
) -> tuple[Digest, bytes | None, os.stat_result, int | None]:
    """Hash the regular file ``name`` in ``dir_fd`` through one descriptor,
    after ``budget`` accepted its size (nothing is read otherwise). With
    ``holds`` and a file too big to keep in memory, a write lease is taken
    on that descriptor before the hash; when it is still whole after it,
    the descriptor is returned open, lease held (else None).

    Raises ``InvalidArgument`` naming ``shown`` when what is there now is not
    a regular file (swapped since it was listed), it grows while read or
    (``upper_of_overlay``: the xattr namespace of the overlay whose upper
    layer holds it) it is an overlay metacopy file, and
    ``ResourceExhausted`` when it would take the outputs over the limit.
    """
    fd = open_listed(dir_fd, name, _FILE_FLAGS, shown)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"output '{printable(shown)}' is no longer a regular file")
        if upper_of_overlay is not None:
            refuse_metacopy(fd, shown, upper_of_overlay)
        budget.charge(shown, info)
        leased = (
            holds is not None
            and info.st_size > KEEP_IN_MEMORY
            and holds.left > 0
            and take_lease(fd)
        )
        try:
            digest, data = hash_fd(fd, info.st_size)
        except InvalidArgument:
            raise InvalidArgument(
                f"output '{printable(shown)}' grew while lre read it (was {info.st_size} bytes)"
            ) from None
        if leased and holds is not None and data is None and holds_lease(fd):
            holds.keep(fd)
            return digest, data, info, fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return digest, data, info, None


class _Holds:
    """The descriptors one scan keeps open (``HELD_AT_MOST``), all closed
    by ``close`` when the scan fails."""

    def __init__(self) -> None:
        self.left = HELD_AT_MOST
        self._fds: list[int] = []

    def keep(self, fd: int) -> None:
        self.left -= 1
        self._fds.append(fd)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def _marked_in(directory: MergedDir, entry: Entry) -> OverlayXattrs | None:
    """Where ``entry`` of ``directory`` may carry overlay marks: the
    overlay's xattr namespace for a file of its upper layer, else None."""
    return directory.xattrs if directory.layered and not entry.from_lower else None


def _movable(info: os.stat_result, owner: int | None = None) -> bool:
    """One link, and lre's own file or one of ``owner`` (the uid actions run
    as, whose files lre, root, gives itself before moving them)."""
    return info.st_nlink == 1 and info.st_uid in (os.geteuid(), owner)


def _blob(message: re_pb2.Directory | re_pb2.Tree) -> tuple[Digest, bytes]:
    data = message.SerializeToString(deterministic=True)
    return Digest(hashlib.sha256(data).hexdigest(), len(data)), data


def _check_output_symlink(name: str, relative_link: str, target: str, allow: bool) -> None:
    check_target(name, target)
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


@dataclass(slots=True)
class _Level:
    """One directory being read by ``_TreeBuilder.build``: its listing, the
    next entry to look at and the message built so far."""

    dir: MergedDir
    relative: str
    shown: str
    depth: int
    entries: list[Entry]
    directory: re_pb2.Directory = field(default_factory=re_pb2.Directory)
    children: list[Digest] = field(default_factory=list)
    next: int = 0


@dataclass(frozen=True, slots=True)
class _Roots:
    """Where files found are opened again: the directory the action wrote
    to and, in a view, the staged tree under it (files from there are CAS
    inodes, never movable)."""

    upper: Path
    lower: Path | None
    #: mount points (lre's namespace) at or below ``upper``: a file reached
    #: through one is not the action's, whoever owns it
    mounts: tuple[str, ...] = ()
    #: the uid actions run as (None: lre's own): its files are movable too
    owner: int | None = None
    #: where a view's large files stay open under a lease (None: nowhere)
    holds: _Holds | None = None

    def holds_for(self, entry: Entry, relative: str) -> _Holds | None:
        """Where to hold ``entry`` open: only a file of a view's upper layer
        (the action's own tmpfs), never one of a mount the action left there
        (it may be reachable elsewhere: read and verified when copied)."""
        if self.holds is None or self.lower is None or entry.from_lower:
            return None
        return None if self._under_mount(self.upper / relative) else self.holds

    def _under_mount(self, path: Path) -> bool:
        shown = str(path)
        return any(shown == point or shown.startswith(point + "/") for point in self.mounts)

    def movable(self, entry: Entry, path: Path, info: os.stat_result) -> bool:
        if self.lower is not None:
            # A view's upper layer is the action's own tmpfs, dropped whole
            # once the outputs are stored: a move would be a copy anyway.
            return False
        if not _movable(info, self.owner) or not fits(path):
            # too deep to move by its path: copied through a descriptor
            return False
        return not self._under_mount(path)

    def found(
        self,
        entry: Entry,
        relative: str,
        digest: Digest,
        data: bytes | None,
        info: os.stat_result,
        held: int | None = None,
    ) -> FoundFile:
        root = self.lower if entry.from_lower and self.lower is not None else self.upper
        return FoundFile(
            root / relative,
            digest,
            bool(info.st_mode & stat.S_IXUSR),
            data,
            movable=self.movable(entry, root / relative, info),
            root=root,
            relative=relative,
            held=held,
        )


class _TreeBuilder:
    """Builds the ``Tree`` of one output directory, depth first with a stack
    of its own (a directory nested thousands deep costs no Python frames),
    refusing it as soon as it is over a tree limit or the output budget."""

    def __init__(
        self,
        found: FoundOutputs,
        name: str,
        allow_escaping: bool,
        roots: _Roots,
        limits: ActionLimits,
        budget: OutputBudget,
    ) -> None:
        self.found = found
        self.name = name
        self.allow = allow_escaping
        self.roots = roots
        self.limits = limits
        self.budget = budget
        self.directories: dict[Digest, re_pb2.Directory] = {}
        self.edges: dict[Digest, list[Digest]] = {}
        self.entry_count = 0
        self.directory_count = 1

    def _listing(self, merged: MergedDir, relative: str, shown: str, depth: int) -> _Level:
        items = merged.listing()
        for item in items:
            check_name(f"{shown}/{item.name}")
        self.entry_count += len(items)
        if self.entry_count > self.limits.max_tree_entries:
            raise self._over(self.limits.max_tree_entries, "max_tree_entries", "entries")
        return _Level(merged, relative, shown, depth, items)

    def _over(self, limit: int, key: str, noun: str) -> InvalidArgument:
        return tree_over_limit(f"output directory {self.name!r}", limit, key, noun)

    def build(self, merged: MergedDir, relative: str, shown: str) -> Digest:
        """Directory digest of the directory ``merged`` (its path
        ``relative`` to the input root); ``shown`` is its name in messages.
        ``merged`` stays the caller's; every descriptor opened below is
        closed, also on failure."""
        stack = [self._listing(merged, relative, shown, 0)]
        try:
            while True:
                level = stack[-1]
                if level.next < len(level.entries):
                    child = self._step(level)
                    if child is not None:
                        stack.append(child)
                    continue
                digest, data = _blob(level.directory)
                self.found.blobs[digest] = data
                self.directories[digest] = level.directory
                self.edges[digest] = level.children
                stack.pop()
                if not stack:
                    return digest
                level.dir.close()
                parent = stack[-1]
                parent.directory.directories.add(
                    name=level.relative.rpartition("/")[2], digest=digest.to_proto()
                )
                parent.children.append(digest)
        finally:
            for level in stack[1:]:
                level.dir.close()

    def _step(self, level: _Level) -> _Level | None:
        """Handle ``level``'s next entry; the listing of a subdirectory to
        descend into, or None."""
        entry = level.entries[level.next]
        level.next += 1
        name, info = entry.name, entry.info
        child_relative = f"{level.relative}/{name}"
        child_shown = f"{level.shown}/{name}"
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(name, dir_fd=level.dir.fd_of(entry))
            _check_output_symlink(child_shown, child_relative, target, self.allow)
            level.directory.symlinks.add(name=name, target=target)
        elif stat.S_ISDIR(info.st_mode):
            if level.depth + 1 > self.limits.max_tree_depth:
                raise self._over(self.limits.max_tree_depth, "max_tree_depth", "levels deep")
            self.directory_count += 1
            if self.directory_count > self.limits.max_tree_directories:
                raise self._over(
                    self.limits.max_tree_directories, "max_tree_directories", "directories"
                )
            child = level.dir.child(entry, child_shown)
            try:
                return self._listing(child, child_relative, child_shown, level.depth + 1)
            except BaseException:
                child.close()
                raise
        elif stat.S_ISREG(info.st_mode):
            digest, data, opened, held = _read_regular(
                level.dir.fd_of(entry),
                name,
                child_shown,
                self.budget,
                upper_of_overlay=_marked_in(level.dir, entry),
                holds=self.roots.holds_for(entry, child_relative),
            )
            item = self.roots.found(entry, child_relative, digest, data, opened, held)
            level.directory.files.add(
                name=name, digest=digest.to_proto(), is_executable=item.executable
            )
            self.found.tree_files.append(item)
        # Sockets, fifos and devices are not representable; they are left out.
        return None

    def tree(self, root_digest: Digest) -> re_pb2.Tree:
        """The Tree: the root, then every distinct child directory, parents
        before children (a post-order walk with a stack, reversed)."""
        order: list[Digest] = []
        seen: set[Digest] = set()
        stack = [(root_digest, iter(self.edges[root_digest]))]
        while stack:
            digest, pending = stack[-1]
            for child in pending:
                if child not in seen:
                    seen.add(child)
                    stack.append((child, iter(self.edges[child])))
                    break
            else:
                stack.pop()
                order.append(digest)
        order.pop()  # the root itself, last in post-order
        order.reverse()  # parents before children
        tree = re_pb2.Tree(root=self.directories[root_digest])
        tree.children.extend(self.directories[d] for d in order)
        return tree


def scan_outputs(
    root: Path,
    requests: list[OutputRequest],
    *,
    allow_escaping_symlinks: bool,
    budget: OutputBudget | None = None,
    lower: Path | None = None,
    xattrs: OverlayXattrs = "trusted",
    mounts: tuple[str, ...] = (),
    owner: int | None = None,
) -> FoundOutputs:
    """Describe the requested outputs that exist under ``root``, within the
    limits of ``budget`` (the defaults of ``ActionLimits`` if None).

    ``root`` is the input root the action wrote to; after an action that ran
    in a view it is the overlay's upper layer and ``lower`` the staged tree
    under it, and the outputs are read from both as the action saw them
    (``_layers``): an input the action left alone is found in ``lower``,
    one it removed is absent, and nothing is ``movable`` (the upper layer is
    a tmpfs of the action's own: every output is copied into the CAS). ``xattrs``
    is where that overlay kept its marks (the view's ``ActionView.xattrs``:
    ``user`` for one mounted with ``userxattr`` in a user namespace); an
    opaque directory is found, and a redirect or metacopy refused, there only.
    ``mounts`` are the mount points at or below ``root`` in lre's namespace
    (an action that can mount there left them): files under one are copied
    into the CAS, never moved (they belong to whatever was mounted there).
    ``owner``: the uid the action ran as; its files may be moved as well.
    A file of the upper layer too big to keep in memory (not under such a
    mount) is hashed under a write lease lre takes first; when nothing
    broke it, the file stays open with the lease held (``FoundFile.held``,
    at most ``HELD_AT_MOST`` of them; the caller closes them,
    ``upload_outputs`` does): from before its hash until that descriptor
    is closed it is lre's alone, so its digest can be trusted when it is
    copied from it. On failure the scan closes what it held.

    Raises ``InvalidArgument`` naming the output when a parent directory of
    it is a symlink, when it changed while being read, when a name or
    symlink target in it is not UTF-8, when an output directory is over a
    tree limit, when a symlink (an output itself or inside an output
    directory) is absolute or leaves the root while the symlink policy is
    reject, or when an overlay mark lre does not follow (redirect,
    metacopy) is on it; ``ResourceExhausted`` when the outputs are over
    ``max_output_bytes`` (see ``_output_checks``). Runs blocking filesystem
    calls; no recursion.
    """
    found = FoundOutputs()
    budget = budget if budget is not None else OutputBudget(ActionLimits())
    holds = _Holds()
    roots = _Roots(root, lower, mounts, owner, holds)
    merged = MergedDir.open_root(root, lower, xattrs=xattrs)
    try:
        for request in requests:
            _scan_one(found, roots, merged, request, allow_escaping_symlinks, budget)
    except BaseException:
        holds.close()
        raise
    finally:
        merged.close()
    return found


def _scan_one(
    found: FoundOutputs,
    roots: _Roots,
    root: MergedDir,
    request: OutputRequest,
    allow: bool,
    budget: OutputBudget,
) -> None:
    parent_relative, _, leaf = request.relative.rpartition("/")
    try:
        parent = walk(root, parent_relative, request.name)
    except SymlinkInPath:
        raise InvalidArgument(
            f"output {request.name!r}: a directory on its path was replaced by a symlink; "
            "outputs are collected only beneath the input root, without following links"
        ) from None
    if parent is None:
        return
    try:
        entry = parent.lookup(leaf)
        if entry is None:
            return
        info = entry.info
        if stat.S_ISLNK(info.st_mode):
            dir_fd = parent.fd_of(entry)
            target = os.readlink(leaf, dir_fd=dir_fd)
            _check_output_symlink(request.name, request.relative, target, allow)
            kind = request.declared
            if kind == "path":
                kind = _pointed_kind(root, dir_fd, request.relative, target)
            found.symlinks.append((request.name, target, kind))
        elif stat.S_ISREG(info.st_mode):
            digest, data, opened, held = _read_regular(
                parent.fd_of(entry),
                leaf,
                request.name,
                budget,
                upper_of_overlay=_marked_in(parent, entry),
                holds=roots.holds_for(entry, request.relative),
            )
            found.files.append(
                (request.name, roots.found(entry, request.relative, digest, data, opened, held))
            )
        elif stat.S_ISDIR(info.st_mode):
            merged = parent.child(entry, request.name)
            try:
                builder = _TreeBuilder(found, request.name, allow, roots, budget.limits, budget)
                root_digest = builder.build(merged, request.relative, request.name)
            finally:
                merged.close()
            tree = builder.tree(root_digest)
            tree_digest, tree_data = _blob(tree)
            found.blobs[tree_digest] = tree_data
            found.directories.append((request.name, tree_digest, root_digest))
    finally:
        if parent is not root:
            parent.close()


def _pointed_kind(root: MergedDir, dir_fd: int, relative_link: str, target: str) -> str:
    """``"directory"`` or ``"file"``: what the output symlink at
    ``relative_link`` (in ``dir_fd``) points at, only looked up (metadata;
    nothing is opened through the link), ``"file"`` when nothing is there.
    Beneath an overlay a relative target inside the input root is looked up
    in the merged layers, not following a further symlink; any other
    through the filesystem."""
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(relative_link), target))
    if (
        root.layered
        and not target.startswith("/")
        and joined != ".."
        and not joined.startswith("../")
    ):
        if joined == ".":
            return "directory"
        parent_relative, _, leaf = joined.rpartition("/")
        try:
            parent = walk(root, parent_relative, joined)
        except (SymlinkInPath, InvalidArgument):
            return "file"
        if parent is None:
            return "file"
        try:
            entry = parent.lookup(leaf)
        finally:
            if parent is not root:
                parent.close()
        return "directory" if entry is not None and stat.S_ISDIR(entry.info.st_mode) else "file"
    try:
        pointed = os.stat(posixpath.basename(relative_link), dir_fd=dir_fd)
    except OSError:
        return "file"
    return "directory" if stat.S_ISDIR(pointed.st_mode) else "file"


def open_own_log(path: Path, identity: tuple[int, int], flags: int) -> tuple[int, os.stat_result]:
    """Open the action's stdout or stderr file at ``path`` with ``flags``,
    the very file lre opened for it (``identity``: its device and inode);
    the descriptor and its status. Raises ``InvalidArgument`` when the
    action removed it or put another file (a symlink, a link elsewhere, a
    FIFO) in its place."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise InvalidArgument(
            f"the action removed or replaced its {path.name} file ({error.strerror})"
        ) from None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != identity or not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"the action replaced its {path.name} file with another")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def log_file(
    path: Path, identity: tuple[int, int], budget: OutputBudget | None = None
) -> FoundFile:
    """Hash the action's stdout or stderr file, the very one lre opened for it.

    Raises ``InvalidArgument`` when the action put another file (a link to a
    file elsewhere, a FIFO, a symlink) in its place or it grows while read,
    and ``ResourceExhausted`` (before reading it) when it would take the
    action's outputs over ``budget``.
    """
    fd, info = open_own_log(path, identity, os.O_RDONLY)
    try:
        if budget is not None:
            budget.charge(path.name, info)
        digest, data = hash_fd(fd, info.st_size)
    finally:
        os.close(fd)
    movable = info.st_nlink == 1 and info.st_uid == os.geteuid()
    return FoundFile(path, digest, False, data, movable=movable)
