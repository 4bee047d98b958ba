"""Write leases: how lre knows that no other open file of an output exists.

The kernel grants a write lease (``fcntl F_SETLEASE F_WRLCK``) on a file
only when no other open file of its inode exists (for reading, writing or
behind a mapping), and breaks it as soon as anything else opens or
truncates the file; the opener then waits for the holder (up to the
kernel's lease-break time, 45 s by default). While lre holds the lease
continuously, the file can change through nobody but lre. A break is
signalled with SIGURG, whose default is to be ignored (SIGIO, the default
signal, would end lre). Leases need the file's owner or CAP_LEASE; a
filesystem without them refuses. Every call is a blocking syscall (cheap).
"""

from __future__ import annotations

import fcntl
import signal

__all__ = ["drop_lease", "holds_lease", "take_lease"]

_F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
_F_GETLEASE = getattr(fcntl, "F_GETLEASE", 1025)
_F_WRLCK = getattr(fcntl, "F_WRLCK", 1)
_F_UNLCK = getattr(fcntl, "F_UNLCK", 2)
_F_SETSIG = getattr(fcntl, "F_SETSIG", 10)


def take_lease(fd: int) -> bool:
    """Take a write lease on ``fd``'s file: False when refused (another open
    file of it exists, not lre's file, or no leases on that filesystem)."""
    try:
        fcntl.fcntl(fd, _F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, _F_SETLEASE, _F_WRLCK)
    except OSError:
        return False
    return True


def holds_lease(fd: int) -> bool:
    """Whether the write lease taken on ``fd`` is still whole (no break has
    begun: nothing else opened the file since)."""
    try:
        return int(fcntl.fcntl(fd, _F_GETLEASE)) == _F_WRLCK
    except OSError:
        return False


def drop_lease(fd: int) -> None:
    """Let go of ``fd``'s lease (an opener waiting on it proceeds). Raises
    ``OSError`` when the kernel refuses."""
    fcntl.fcntl(fd, _F_SETLEASE, _F_UNLCK)
