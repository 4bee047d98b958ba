"""Linux's new mount API through ctypes, for ``_view`` and ``_view_dev``: the
syscall numbers and flags, ``mount_attr``, the C library and the calls
that raise ``OSError`` naming what failed.

Standard library only: the view helper loads it by its file name.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOVE_MOUNT_T_EMPTY_PATH = 0x40
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_NOEXEC = 0x8
MOUNT_ATTR_IDMAP = 0x00100000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_PRIVATE = 1 << 18
FSOPEN_CLOEXEC = 0x1
FSMOUNT_CLOEXEC = 0x1
FSCONFIG_SET_FLAG = 0
FSCONFIG_SET_STRING = 1
FSCONFIG_SET_FD = 5
FSCONFIG_CMD_CREATE = 6

#: x86_64 and aarch64 share these numbers (the new mount API came after the
#: generic table was unified).
SYSCALLS = {
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "mount_setattr": 442,
}


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _load(kind: type[ctypes.CDLL]) -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = kind(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None
    libc.syscall.restype = ctypes.c_long
    return libc


#: Calls through this handle let other threads run meanwhile (ctypes drops
#: the GIL around each): for the one slow call of a view, the overlay's
#: creation (its feature probes create and rename inodes on the upper
#: filesystem: hundreds of microseconds on ext4). None off Linux.
LIBC = _load(ctypes.CDLL)
#: Calls through this one keep the GIL. A view makes some thirty mount
#: calls of a few microseconds each; with lre's other threads waiting for
#: the GIL, dropping and taking it back around each one cost more than the
#: calls (a futex wake and a context switch per call).
#: Only for calls on lre's own paths, descriptors and the view's fixed
#: mount points: a path the user configured (a writable path on a hung
#: network filesystem) must not stall every thread of lre.
HELD = _load(ctypes.PyDLL)


def held() -> ctypes.CDLL:
    """``HELD``; ``OSError`` off Linux."""
    if HELD is None:
        raise OSError("mount namespaces need Linux")
    return HELD


def failure(call: str, what: str) -> OSError:
    """The ``OSError`` of the ``call`` on ``what`` that just failed (its errno)."""
    code = ctypes.get_errno()
    return OSError(code, f"{call} {what}: {os.strerror(code)}")


def syscall(name: str, what: str, *args: object, release: bool = False) -> int:
    """The raw syscall ``name`` (the GIL kept unless ``release``); raises
    ``OSError`` naming it and ``what``."""
    libc = LIBC if release else HELD
    if libc is None:
        raise OSError("mount namespaces need Linux")
    result = int(libc.syscall(SYSCALLS[name], *args))
    if result < 0:
        raise failure(name, what)
    return result


def set_attributes(
    path: str,
    *,
    set_: int = 0,
    clear: int = 0,
    propagation: int = 0,
    recursive: bool = False,
    fd: int = AT_FDCWD,
    userns: int = 0,
) -> None:
    """``mount_setattr`` on the mount at ``path``, or on the detached mount
    ``fd`` (``path`` then only names it); raises ``OSError``."""
    attr = MountAttr(set_, clear, propagation, userns)
    flags = (AT_RECURSIVE if recursive else 0) | (AT_EMPTY_PATH if fd != AT_FDCWD else 0)
    target = b"" if fd != AT_FDCWD else path.encode()
    syscall("mount_setattr", path, fd, target, flags, ctypes.byref(attr), ctypes.sizeof(attr))
