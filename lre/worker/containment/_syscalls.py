"""Thin wrappers of the system calls the containment backends make.

Each returns quietly where the backends expect a process to be gone
already (``kill`` of a dead pid) and raises ``OSError`` naming the call
otherwise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import socket
import struct
import sys

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def _load_libc(kind: type[ctypes.CDLL] = ctypes.CDLL) -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return kind(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


#: The C library; each call drops the GIL while it runs.
LIBC = _load_libc()
#: The same, each call keeping the GIL: for the quick namespace and
#: credential calls a spawner thread makes per action, where dropping and
#: taking the GIL back (a futex wake and a context switch while lre's other
#: threads wait for it) costs more than the call itself.
HELD_LIBC = _load_libc(ctypes.PyDLL)


def call(name: str, *args: int, release: bool = False) -> None:
    """Call a libc function that returns -1 and sets errno on failure; the
    GIL is kept during the call unless ``release`` (for a slow one)."""
    libc = LIBC if release else HELD_LIBC
    assert libc is not None
    if getattr(libc, name)(*args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")


def kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def loopback_up() -> None:
    """Bring ``lo`` up in the calling thread's (new) network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
