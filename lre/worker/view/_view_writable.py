"""Writable host paths opened without symlinks and judged by what they are.

A view binds host directories writable (``ActionView.writable``). Naming one
by its path is not enough: a build may leave a symlink in a directory it
could write, and a later lookup of a path through it lands anywhere (lre's
CAS, the site-packages of the Python running lre, the user's home). So
every writable path is

- opened with no symlink in any component (``open_without_symlinks``:
  ``openat2`` with ``RESOLVE_NO_SYMLINKS``, Linux 5.6+; where the kernel
  lacks ``openat2`` (ENOSYS), one ``openat(O_NOFOLLOW)`` per component from
  ``/``, which refuses the same paths), and
- judged by that descriptor (``judge``): its device and inode and those of
  each directory above it (``..`` from the descriptor, never the path
  again) against ``Protected`` marks. A writable path may not be nor lie
  inside one of ``Protected.within`` (lre's own directories, its
  installation, the user's home) and may not be one of
  ``Protected.containing`` (the directories above the installation and
  the home: it would hold them). A path holding lre's own directories is
  allowed: the view masks them, on the very directories lre found
  (``_view.build_view``).

The caller then mounts that same descriptor (``open_tree`` of it), so what
was judged is what the action gets. This module is loaded by file name in
the view helper (``_view_helper.py``): the standard library only.

A refusal raises ``WritableRefused`` (its ``path`` is the writable path as
named); an ``OSError`` other than a symlink or a missing directory
propagates.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
from dataclasses import dataclass

__all__ = [
    "Mark",
    "Protected",
    "WritableRefused",
    "ancestry",
    "identity",
    "judge",
    "mark_of",
    "marks_above",
    "open_without_symlinks",
]

_SYS_OPENAT2 = 437  # x86_64 and aarch64 alike
_RESOLVE_NO_SYMLINKS = 0x04
#: Directories are opened as bare references: nothing is read through them.
_OPEN_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
#: A device and an inode, and the path they were found at (for messages).
Mark = tuple[int, int, str]


class WritableRefused(Exception):
    """A writable path an action may not have; ``path`` as it was named."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path!r} {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Protected:
    """What a writable path is judged against (see the module docstring)."""

    #: Directories a writable path may not be nor lie inside.
    within: tuple[Mark, ...] = ()
    #: Directories a writable path may not be: each directory above a
    #: directory it may not contain, that directory itself included.
    containing: tuple[Mark, ...] = ()


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


def _load() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None
    libc.syscall.restype = ctypes.c_long
    return libc


_LIBC = _load()


def _openat2(path: str) -> int:
    """``openat2(path)`` with no symlink allowed; raises ``OSError`` (ENOSYS
    where the kernel has no ``openat2``)."""
    if _LIBC is None:
        raise OSError(errno.ENOSYS, "openat2 needs Linux")
    how = _OpenHow(_OPEN_FLAGS, 0, _RESOLVE_NO_SYMLINKS)
    fd = int(
        _LIBC.syscall(_SYS_OPENAT2, -100, path.encode(), ctypes.byref(how), ctypes.sizeof(how))
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"openat2 {path}: {os.strerror(code)}")
    return fd


def _open_by_components(path: str) -> int:
    """The same lookup as ``_openat2`` one component at a time from ``/``
    (``O_NOFOLLOW``: a symlink fails with ELOOP or ENOTDIR)."""
    fd = os.open("/", _OPEN_FLAGS)
    try:
        for part in path.split("/"):
            if part in ("", "."):
                continue
            following = os.open(part, _OPEN_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = following
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_without_symlinks(path: str) -> int:
    """An ``O_PATH`` descriptor of the directory at the absolute, normalised
    ``path``, looked up with no symlink in any component (the caller closes
    it). Raises ``WritableRefused`` when a component is a symlink (or not a
    directory) or the path does not exist, ``OSError`` otherwise."""
    try:
        try:
            fd = _openat2(path)
        except OSError as error:
            if error.errno != errno.ENOSYS:
                raise
            fd = _open_by_components(path)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise WritableRefused(
                path, "has a symbolic link (or a non-directory) in it; name the real directory"
            ) from None
        if error.errno == errno.ENOENT:
            raise WritableRefused(path, "is not an existing directory") from None
        raise
    return fd


def identity(fd: int) -> tuple[int, int]:
    """The device and inode of what ``fd`` refers to."""
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def ancestry(fd: int) -> list[tuple[int, int]]:
    """The device and inode of ``fd``'s directory and of each directory
    above it up to ``/`` of the calling thread, found through ``..`` from
    the descriptor (a mount's root leads to where it is mounted)."""
    found = [identity(fd)]
    current = os.open("..", _OPEN_FLAGS, dir_fd=fd)
    try:
        while True:
            mark = identity(current)
            if mark == found[-1]:
                return found
            found.append(mark)
            parent = os.open("..", _OPEN_FLAGS, dir_fd=current)
            os.close(current)
            current = parent
    finally:
        os.close(current)


def mark_of(path: str) -> Mark | None:
    """The mark of the directory or file at ``path`` (symlinks followed, as
    lre's own configuration may name them), or None when it is not there."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino, path


def marks_above(path: str) -> list[Mark]:
    """The marks of the directory ``path`` (symlinks followed) and of each
    directory above it; empty when it is not there."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (OSError, ValueError):
        return []
    try:
        return [(dev, ino, path) for dev, ino in ancestry(fd)]
    finally:
        os.close(fd)


def judge(path: str, fd: int, protected: Protected) -> None:
    """Refuse (``WritableRefused``) the writable directory ``fd``, named
    ``path``, when it is or lies inside one of ``protected.within`` or is
    one of ``protected.containing`` (then it holds the directory that mark
    names)."""
    marks = ancestry(fd)
    within = {(dev, ino): where for dev, ino, where in protected.within}
    for mark in marks:
        where = within.get(mark)
        if where is not None:
            how = "is" if mark == marks[0] else "lies inside"
            raise WritableRefused(path, f"{how} {where!r}, which actions may not write")
    for dev, ino, where in protected.containing:
        if (dev, ino) == marks[0]:
            raise WritableRefused(path, f"contains {where!r}, which actions may not write")
