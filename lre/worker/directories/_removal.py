"""Removing a directory tree an action left, without ever leaving it.

``remove_tree(path)`` deletes ``path`` and everything below it through
directory file descriptors only: each directory is opened relative to its
parent's descriptor with ``O_NOFOLLOW``, its entries are unlinked relative to
its own, and it is removed relative to its parent's. A directory swapped for
a symlink between two calls is therefore never entered (the open fails, the
symlink itself is unlinked); a name is never resolved through a path that an
action could have changed. Every directory entered must be on the device and
mount of ``path``'s parent (``st_dev`` and, where ``statx`` reports it, the
mount id): a mount point below it, even a bind mount of the same filesystem,
raises ``CrossesMount`` before anything under it is touched, so clean-up never
deletes the files of a directory mounted into an action directory.

The walk is a loop, not a recursion, and holds one directory descriptor at a
time (going back up through ``..``, checked against the device and inode it
came from), so neither the depth of a tree nor the descriptor limit can stop
it. Directories the action made unreadable or unwritable (mode 000, 0500) are
given back their owner's bits first when lre owns them.

``MountTable`` reads ``/proc/self/mountinfo`` for mounts below one of lre's
directories and detaches them (``umount2(MNT_DETACH | UMOUNT_NOFOLLOW)``),
re-reading the table only when the kernel says it changed (``poll`` on the
open file), so the check costs nothing per action while no mount comes or goes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import re
import select
import stat
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CrossesMount", "MountTable", "remove_tree"]

log = logging.getLogger(__name__)

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_ONLY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MNT_DETACH = 2
_UMOUNT_NOFOLLOW = 8
_AT_EMPTY_PATH = 0x1000
_STATX_MNT_ID = 0x1000
_STATX_MNT_ID_OFFSET = 144


class CrossesMount(OSError):
    """A directory below the tree being removed is another mount; nothing
    under it was touched."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EXDEV, f"{path} is a mount point inside an action directory")


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()
_STATX = getattr(_LIBC, "statx", None) if _LIBC is not None else None


def _mount_id(fd: int) -> int | None:
    """The id of the mount ``fd`` lies on (``statx``); None where unknown."""
    if _STATX is None:
        return None
    buffer = ctypes.create_string_buffer(256)
    if _STATX(fd, b"", _AT_EMPTY_PATH, _STATX_MNT_ID, buffer) != 0:
        return None
    mask = struct.unpack_from("<I", buffer.raw, 0)[0]
    if not mask & _STATX_MNT_ID:
        return None
    value: int = struct.unpack_from("<Q", buffer.raw, _STATX_MNT_ID_OFFSET)[0]
    return value


@dataclass(slots=True)
class _Frame:
    """A directory being emptied: its name in its parent, identity, and the
    entries (name, is a directory) still to remove."""

    name: str
    device: int
    inode: int
    pending: list[tuple[str, bool]]


def _listing(fd: int) -> list[tuple[str, bool]]:
    with os.scandir(fd) as entries:
        return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]


def _open_directory(
    parent: int, name: str, device: int, mount: int | None, shown: str
) -> int | None:
    """``name`` under ``parent`` opened as a directory on ``device`` and
    ``mount``; None when it is no longer a directory (swapped meanwhile).
    Raises ``CrossesMount`` for another mount, ``OSError`` otherwise."""
    try:
        fd = os.open(name, _DIRECTORY, dir_fd=parent)
    except PermissionError:
        _restore_owner_bits(parent, name, device, shown)
        fd = os.open(name, _DIRECTORY, dir_fd=parent)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            return None
        raise
    try:
        info = os.fstat(fd)
        if info.st_dev != device or (mount is not None and _mount_id(fd) != mount):
            raise CrossesMount(shown)
        if stat.S_IMODE(info.st_mode) & 0o700 != 0o700 and info.st_uid == os.geteuid():
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _restore_owner_bits(parent: int, name: str, device: int, shown: str) -> None:
    """Give a directory lre cannot read back its owner's bits (through an
    ``O_PATH`` descriptor, so the name is resolved once, without following)."""
    fd = os.open(name, _PATH_ONLY, dir_fd=parent)
    try:
        if os.fstat(fd).st_dev != device:
            raise CrossesMount(shown)
        os.chmod(f"/proc/self/fd/{fd}", 0o700)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Delete ``path`` (file, symlink or directory tree); see the module
    docstring. A path that does not exist is ignored. Raises ``CrossesMount``
    when a mount lies below it and ``OSError`` when an entry cannot be removed
    (an immutable file, a directory of another user); what could be removed
    before that is gone, nothing outside ``path`` is touched."""
    parent = os.open(path.parent, _DIRECTORY)
    try:
        try:
            info = os.lstat(path.name, dir_fd=parent)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(path.name, dir_fd=parent)
            return
        _remove_directory(parent, path.name, str(path))
    finally:
        os.close(parent)


def _remove_directory(parent: int, name: str, shown: str) -> None:
    parent_info = os.fstat(parent)
    device = parent_info.st_dev
    mount = _mount_id(parent)
    fd = _open_directory(parent, name, device, mount, shown)
    if fd is None:
        os.unlink(name, dir_fd=parent)
        return
    info = os.fstat(fd)
    frames = [_Frame(name, info.st_dev, info.st_ino, _listing(fd))]
    try:
        while frames:
            frame = frames[-1]
            if frame.pending:
                child, is_directory = frame.pending.pop()
                if is_directory:
                    where = f"{shown}/.../{child}" if len(frames) > 1 else f"{shown}/{child}"
                    child_fd = _open_directory(fd, child, device, mount, where)
                    if child_fd is not None:
                        child_info = os.fstat(child_fd)
                        os.close(fd)
                        fd = child_fd
                        frames.append(
                            _Frame(child, child_info.st_dev, child_info.st_ino, _listing(fd))
                        )
                        continue
                try:
                    os.unlink(child, dir_fd=fd)
                except FileNotFoundError:
                    pass
                except OSError as error:
                    where = f"{shown}/.../{child}" if len(frames) > 1 else f"{shown}/{child}"
                    raise OSError(error.errno, error.strerror, where) from None
                continue
            frames.pop()
            if frames:
                up = os.open("..", _DIRECTORY, dir_fd=fd)
                up_info = os.fstat(up)
                if (up_info.st_dev, up_info.st_ino) != (frames[-1].device, frames[-1].inode):
                    os.close(up)
                    raise OSError(errno.ESTALE, f"{shown}: a directory moved while being removed")
                os.close(fd)
                fd = up
                _rmdir(frame.name, fd)
            else:
                os.close(fd)
                fd = -1
                _rmdir(frame.name, parent)
    finally:
        if fd >= 0:
            os.close(fd)


def _rmdir(name: str, parent: int) -> None:
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        pass  # removed by someone else meanwhile


_ESCAPE = re.compile(rb"\\([0-7]{3})")


def _unescape(field: bytes) -> str:
    return os.fsdecode(_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), field))


class MountTable:
    """The mount points of this process's mount namespace (see the module
    docstring). Never raises: without ``/proc`` it knows no mounts.
    Thread-safe: the janitor's threads and the worker's event loop share one
    (a caller that waited for another's re-read sees its result)."""

    def __init__(self, source: str = "/proc/self/mountinfo") -> None:
        self.source = source
        self._points: list[str] = []
        self._poll: select.poll | None = None
        self._fd = -1
        try:
            self._fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLPRI | select.POLLERR)
        except OSError:
            self._poll = None
        self._stale = True
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        if self._poll is not None and not self._stale and not self._poll.poll(0):
            return
        points: list[str] = []
        try:
            if self._fd >= 0:
                os.lseek(self._fd, 0, os.SEEK_SET)
                chunks = []
                while chunk := os.read(self._fd, 1 << 16):
                    chunks.append(chunk)
                data = b"".join(chunks)
            else:
                data = Path(self.source).read_bytes()
        except OSError:
            data = b""
        for line in data.splitlines():
            fields = line.split(b" ")
            if len(fields) > 4:
                points.append(_unescape(fields[4]))
        self._points = points
        self._stale = False

    def below(self, directory: Path) -> list[str]:
        """Mount points strictly below ``directory``, deepest first."""
        with self._lock:
            self._refresh()
            points = self._points
        prefix = str(directory).rstrip("/") + "/"
        return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)

    def detach_below(self, directory: Path) -> list[str]:
        """Detach every mount below ``directory`` (stacked ones too); returns
        those that could not be detached (logged once each)."""
        failed: list[str] = []
        for _ in range(8):  # a pass per layer of stacked mounts
            points = [p for p in self.below(directory) if p not in failed]
            if not points:
                break
            for point in points:
                error = _detach(point)
                self._stale = True
                if error is not None:
                    log.warning("cannot detach the mount at %s left by an action: %s", point, error)
                    failed.append(point)
                else:
                    log.warning("detached a mount an action left at %s", point)
        return failed

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _detach(point: str) -> str | None:
    if _LIBC is None:
        return "not Linux"
    if _LIBC.umount2(os.fsencode(point), _MNT_DETACH | _UMOUNT_NOFOLLOW) == 0:
        return None
    return os.strerror(ctypes.get_errno())
