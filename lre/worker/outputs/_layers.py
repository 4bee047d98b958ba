"""What an action saw of its input root: an overlay's two layers, merged again.

In a view (``_view.py``) the action's input root is an overlay: the lower
layer is the staged tree (hardlinks to the CAS's own inodes), the upper one
(``upper`` on the action's own tmpfs, read through lre's descriptor of it)
holds whatever the action created or changed. An output may
be, or hold, an input the action never touched; that lives in the lower
layer only. The overlay is gone with the action's namespace when lre reads
the outputs, so ``MergedDir`` merges the two layers itself, one directory
at a time (a pair of descriptors), by overlayfs's own rules:

- an upper entry hides the lower entry of the same name;
- a whiteout (a character device numbered 0/0) in the upper layer hides
  the name: it is absent (the action removed it);
- an upper directory over a lower directory shows the entries of both,
  unless it is opaque (``<ns>.overlay.opaque`` = ``y``: the action
  removed the directory and made a new one), then only its own;
- any other upper entry (a file over a directory, a directory over a file)
  stands alone;
- a name only the lower layer has is the lower entry; a directory so comes
  wholly from the lower layer.

``<ns>`` is the xattr namespace the overlay kept its marks in, as the
view named it (``ActionView.xattrs``, given to ``MergedDir.open_root``):
``trusted`` for an overlay lre mounted with the host's privileges
(``pidns``), ``user`` for one mounted with ``userxattr`` inside a user
namespace (``userns``, which can write no ``trusted.*`` xattr). Only that
namespace's marks are read: marks in the other one were not the overlay's.

What else is assumed of the mount (``_view.OVERLAY_OPTIONS`` pins it
whatever the kernel's defaults: ``redirect_dir=nofollow``,
``metacopy=off``, ``index=off``): overlayfs never redirects a directory to
another lower path and copies a file's data up with its metadata. An upper
directory carrying ``<ns>.overlay.redirect``, or an upper file carrying
``<ns>.overlay.metacopy`` (an overlay mounted otherwise), is refused with
``InvalidArgument`` rather than read as something the action did not see.

Without a view there is one layer (``lower`` None) and the same code reads
it as it is; a device there is left out of the outputs as before, so a
0/0 device read as a whiteout changes nothing.

Everything is opened from directory descriptors, one name at a time, with
``O_NOFOLLOW``: no symlink is ever followed, in either layer. Failures:
``open_listed`` raises ``InvalidArgument`` naming the output when an entry
changed since it was listed, ``walk`` raises ``SymlinkInPath`` when a
directory on the path is a symlink.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from lre.errors import InvalidArgument
from lre.worker.directories import SymlinkInPath
from lre.worker.outputs._output_checks import printable
from lre.worker.view import OverlayXattrs

__all__ = [
    "DIR_FLAGS",
    "Entry",
    "MergedDir",
    "OverlayXattrs",
    "open_listed",
    "refuse_metacopy",
    "walk",
]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY


@dataclass(frozen=True, slots=True)
class Entry:
    """A name as the action saw it: its ``lstat`` and the layer holding it."""

    name: str
    info: os.stat_result
    from_lower: bool


def _whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def open_listed(dir_fd: int, name: str, flags: int, shown: str) -> int:
    """Open ``name``, just listed in ``dir_fd``, without following a link.

    Raises ``InvalidArgument`` naming ``shown`` when it cannot be opened so
    (removed, or swapped for a symlink or another kind of file since).
    """
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        raise InvalidArgument(
            f"output '{printable(shown)}' changed while it was collected ({error.strerror})"
        ) from None


def _overlay_marks(fd: int, xattrs: OverlayXattrs) -> list[str]:
    """The overlay's marks on ``fd``: names of its xattrs under
    ``<xattrs>.overlay.``, without that prefix (``opaque``, ``redirect``)."""
    prefix = f"{xattrs}.overlay."
    try:
        names = os.listxattr(fd)
    except OSError as error:
        if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return []
        raise
    return [name.removeprefix(prefix) for name in names if name.startswith(prefix)]


def refuse_metacopy(fd: int, shown: str, xattrs: OverlayXattrs) -> None:
    """Raise ``InvalidArgument`` naming ``shown`` when the upper file open
    as ``fd`` holds metadata only (its data would be in the lower layer):
    it carries ``<xattrs>.overlay.metacopy``."""
    if "metacopy" in _overlay_marks(fd, xattrs):
        raise InvalidArgument(
            f"output '{printable(shown)}' is an overlay metacopy file; lre mounts its "
            "overlays with metacopy=off and does not read such files"
        )


class MergedDir:
    """One directory of the input root as the action saw it: its upper
    directory, its lower one, or both (merged), each an open descriptor or
    None. ``layered``: the directory belongs to an overlay (upper files may
    carry overlay marks, in the ``xattrs`` namespace). The owner closes it
    (``close``)."""

    __slots__ = ("layered", "lower", "upper", "xattrs")

    def __init__(
        self, upper: int | None, lower: int | None, *, layered: bool, xattrs: OverlayXattrs
    ) -> None:
        self.upper = upper
        self.lower = lower
        self.layered = layered
        self.xattrs: OverlayXattrs = xattrs

    @classmethod
    def open_root(cls, upper: Path, lower: Path | None, *, xattrs: OverlayXattrs) -> MergedDir:
        """The input root: ``upper`` over ``lower`` (``upper`` alone when
        ``lower`` is None), the overlay's marks read in ``xattrs``
        (``ActionView.xattrs`` of the action's view). Raises ``OSError``
        when either cannot be opened as a directory without following a
        symlink."""
        flags = DIR_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC
        upper_fd = os.open(upper, flags)
        try:
            lower_fd = None if lower is None else os.open(lower, flags)
        except BaseException:
            os.close(upper_fd)
            raise
        return cls(upper_fd, lower_fd, layered=lower is not None, xattrs=xattrs)

    def close(self) -> None:
        for fd in (self.upper, self.lower):
            if fd is not None:
                os.close(fd)
        self.upper = self.lower = None

    def fd_of(self, entry: Entry) -> int:
        """The descriptor of the directory that holds ``entry``."""
        fd = self.lower if entry.from_lower else self.upper
        assert fd is not None
        return fd

    def lookup(self, name: str) -> Entry | None:
        """The entry ``name`` as the action saw it, or None when absent."""
        if self.upper is not None:
            try:
                info = os.stat(name, dir_fd=self.upper, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                return None if _whiteout(info) else Entry(name, info, False)
        if self.lower is not None:
            try:
                return Entry(name, os.stat(name, dir_fd=self.lower, follow_symlinks=False), True)
            except FileNotFoundError:
                pass
        return None

    def listing(self) -> list[Entry]:
        """Every entry the action saw here, sorted by name."""
        upper = _scan(self.upper)
        entries = [Entry(n, info, False) for n, info in upper.items() if not _whiteout(info)]
        entries.extend(
            Entry(n, info, True) for n, info in _scan(self.lower).items() if n not in upper
        )
        entries.sort(key=lambda entry: entry.name)
        return entries

    def child(self, entry: Entry, shown: str) -> MergedDir:
        """The directory ``entry`` (listed or looked up here) opened.

        Raises ``InvalidArgument`` naming ``shown`` when it changed since it
        was listed or carries an overlay redirect.
        """
        if entry.from_lower:
            assert self.lower is not None
            return MergedDir(
                None,
                open_listed(self.lower, entry.name, DIR_FLAGS, shown),
                layered=self.layered,
                xattrs=self.xattrs,
            )
        assert self.upper is not None
        upper = open_listed(self.upper, entry.name, DIR_FLAGS, shown)
        try:
            lower = self._lower_under(upper, entry.name, shown) if self.layered else None
        except BaseException:
            os.close(upper)
            raise
        return MergedDir(upper, lower, layered=self.layered, xattrs=self.xattrs)

    def _lower_under(self, upper: int, name: str, shown: str) -> int | None:
        """The lower directory merged under the upper directory ``name``
        (open as ``upper``): None when there is none or ``upper`` is opaque."""
        marks = _overlay_marks(upper, self.xattrs)
        if "redirect" in marks:
            raise InvalidArgument(
                f"output '{printable(shown)}' is an overlay directory redirected elsewhere; "
                "lre mounts its overlays with redirect_dir=nofollow "
                "(it makes no redirects and follows none)"
            )
        opaque = f"{self.xattrs}.overlay.opaque"
        if self.lower is None or ("opaque" in marks and os.getxattr(upper, opaque) == b"y"):
            return None
        try:
            info = os.stat(name, dir_fd=self.lower, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(info.st_mode):
            return None
        return open_listed(self.lower, name, DIR_FLAGS, shown)


def _scan(fd: int | None) -> dict[str, os.stat_result]:
    if fd is None:
        return {}
    with os.scandir(fd) as listing:
        return {entry.name: entry.stat(follow_symlinks=False) for entry in listing}


def walk(root: MergedDir, relative: str, shown: str) -> MergedDir | None:
    """The directory ``relative`` (``/``-separated, ``""`` for ``root``
    itself) as the action saw it, or None when it is missing or not a
    directory. A new ``MergedDir`` the caller closes, unless it is ``root``.

    Raises ``SymlinkInPath`` when a component is a symlink or not a plain
    name, ``InvalidArgument`` (``MergedDir.child``) naming ``shown``.
    """
    if relative in ("", "."):
        return root
    current = root
    try:
        for part in relative.split("/"):
            if part in ("", ".", ".."):
                raise SymlinkInPath(errno.EXDEV, f"{relative!r}: not a plain relative path")
            entry = current.lookup(part)
            if entry is not None and stat.S_ISLNK(entry.info.st_mode):
                raise SymlinkInPath(errno.ELOOP, f"{relative!r}: {part!r} is a symlink")
            if entry is None or not stat.S_ISDIR(entry.info.st_mode):
                if current is not root:
                    current.close()
                return None
            opened = current.child(entry, shown)
            if current is not root:
                current.close()
            current = opened
        return current
    except BaseException:
        if current is not root:
            current.close()
        raise
