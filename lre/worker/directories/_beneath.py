"""Opening a path beneath a directory without ever following a symlink.

An action can replace any directory of its tree by a symlink to somewhere
else on the machine. Everything lre opens inside an action directory after
the action ran (outputs to hash, move or copy) is therefore opened through
``open_beneath``: every component of the relative path must be a real
directory or file under the starting descriptor. A symlink anywhere on the
way, or a ``..`` that would climb out, raises ``SymlinkInPath``; a missing
component raises ``FileNotFoundError`` / ``NotADirectoryError`` as ``open``
would.

On Linux 5.6 and later this is one ``openat2`` call with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``; elsewhere (older kernels, other
systems) a walk of ``openat`` calls with ``O_NOFOLLOW`` from directory
descriptors, one component at a time, gives the same answer; so it does for
a path longer than ``PATH_MAX``, which ``openat2`` refuses whole.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import sys

__all__ = ["SymlinkInPath", "open_beneath"]

_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_O_PATH = getattr(os, "O_PATH", 0)


class SymlinkInPath(OSError):
    """A component of the path is a symlink (or the path climbs out)."""


def _load_syscall() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return function


_SYSCALL = _load_syscall()
_HAVE_OPENAT2 = [_SYSCALL is not None]


def open_beneath(dir_fd: int, relative: str, flags: int) -> int:
    """A descriptor for ``relative`` (``/``-separated, no leading ``/``)
    opened with ``flags`` beneath ``dir_fd``; ``""`` or ``"."`` reopens
    ``dir_fd`` itself. ``O_NOFOLLOW`` and ``O_CLOEXEC`` are always added.

    Raises ``SymlinkInPath`` when any component is a symlink or the path
    leaves ``dir_fd``, else the ``OSError`` of the failing open.
    """
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if relative in ("", "."):
        return os.open(".", flags & ~os.O_NOFOLLOW, dir_fd=dir_fd)
    if _HAVE_OPENAT2[0]:
        try:
            # Without O_NOFOLLOW a symlink as the last component is ELOOP under
            # RESOLVE_NO_SYMLINKS (with it and O_DIRECTORY the kernel says
            # ENOTDIR, which would read as "missing").
            nofollow = os.O_NOFOLLOW if flags & _O_PATH else 0
            return _openat2(dir_fd, relative, (flags & ~os.O_NOFOLLOW) | nofollow)
        except OSError as error:
            if error.errno == errno.ENAMETOOLONG:
                # Deeper than one call takes (PATH_MAX): one name at a time.
                return _walk(dir_fd, relative, flags)
            if error.errno not in (errno.ENOSYS, errno.EPERM):
                if error.errno in (errno.ELOOP, errno.EXDEV):
                    raise SymlinkInPath(error.errno, f"{relative!r}: {error.strerror}") from None
                raise
            _HAVE_OPENAT2[0] = False  # no openat2 here (or a seccomp filter)
    return _walk(dir_fd, relative, flags)


def _openat2(dir_fd: int, relative: str, flags: int) -> int:
    assert _SYSCALL is not None
    how = ctypes.create_string_buffer(
        struct.pack(
            "QQQ", flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
        )
    )
    fd = _SYSCALL(_SYS_OPENAT2, dir_fd, os.fsencode(relative), how, 24)
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), relative)
    return int(fd)


def _walk(dir_fd: int, relative: str, flags: int) -> int:
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise SymlinkInPath(errno.EXDEV, f"{relative!r}: not a plain relative path")
    current = dir_fd
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            part_flags = flags if last else os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
            try:
                fd = os.open(part, part_flags | os.O_CLOEXEC, dir_fd=current)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    try:
                        info = os.stat(part, dir_fd=current, follow_symlinks=False)
                    except OSError:
                        raise error from None
                    if stat.S_ISLNK(info.st_mode) and not (last and flags & _O_PATH):
                        raise SymlinkInPath(
                            errno.ELOOP, f"{relative!r}: {part!r} is a symlink"
                        ) from None
                raise
            if current != dir_fd:
                os.close(current)
            current = fd
        return current
    except BaseException:
        if current != dir_fd:
            os.close(current)
        raise
