"""Removing what does not belong in a filesystem store's directories at open.

Only lre writes there, but an action running as lre's user (``portable``
containment) or a person can leave anything: a directory tree deeper than
Python's recursion limit or PATH_MAX, a symlink to the user's files, a mount.
``remove_leftover`` deletes such an entry without recursion (one directory
descriptor at a time, going down by name and back up through ``..``, each
step checked by device and inode), never follows a symlink, and leaves alone
(with a warning) any tree holding a mount point (``/proc/self/mountinfo``,
so bind mounts of the same filesystem too) or a directory on another device.
It never raises: what cannot be removed stays, is logged once, and the store
opens anyway (the entries are not blobs, so they are never served).
"""

from __future__ import annotations

import logging
import os
import re
import stat

__all__ = ["remove_leftover"]

log = logging.getLogger(__name__)

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ESCAPE = re.compile(rb"\\([0-7]{3})")


class _Refused(Exception):
    """Something under the tree must not be removed by lre."""


def _mount_points() -> list[str]:
    try:
        with open("/proc/self/mountinfo", "rb") as table:
            lines = table.read().splitlines()
    except OSError:
        return []
    points = []
    for line in lines:
        fields = line.split(b" ")
        if len(fields) > 4:
            raw = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), fields[4])
            points.append(os.fsdecode(raw))
    return points


def remove_leftover(path: str) -> None:
    """Delete the file, symlink or directory tree at ``path`` (see the module
    docstring); a path that does not exist is ignored. Never raises."""
    path = os.path.abspath(path)
    prefix = path.rstrip("/") + "/"
    mounted = [p for p in _mount_points() if p == path or p.startswith(prefix)]
    if mounted:
        log.warning("filesystem store: left %s in place: %s is mounted there", path, mounted[0])
        return
    try:
        parent = os.open(os.path.dirname(path), _DIRECTORY)
    except OSError as error:
        log.warning("filesystem store: cannot remove %s: %s", path, error)
        return
    try:
        _remove(parent, os.path.basename(path))
    except (OSError, _Refused) as error:
        log.warning("filesystem store: left %s (or part of it) in place: %s", path, error)
    finally:
        os.close(parent)


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _remove(parent: int, name: str) -> None:
    try:
        info = os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    device = os.fstat(parent).st_dev
    #: (identity, name) of each directory above the one open, top first
    above: list[tuple[tuple[int, int], str]] = [(_identity(os.fstat(parent)), name)]
    fd = _enter(parent, name, device)
    try:
        while True:
            child = _empty_files(fd)
            if child is not None:
                inner = _enter(fd, child, device)
                above.append((_identity(os.fstat(fd)), child))
                os.close(fd)
                fd = inner
                continue
            expected, own_name = above.pop()
            if not above:
                os.close(fd)
                fd = -1
                os.rmdir(own_name, dir_fd=parent)
                return
            up = os.open("..", _DIRECTORY, dir_fd=fd)
            if _identity(os.fstat(up)) != expected:
                os.close(up)
                raise _Refused(f"{own_name!r} moved while it was being removed")
            os.close(fd)
            fd = up
            os.rmdir(own_name, dir_fd=fd)
    finally:
        if fd >= 0:
            os.close(fd)


def _enter(parent: int, name: str, device: int) -> int:
    fd = os.open(name, _DIRECTORY, dir_fd=parent)
    if os.fstat(fd).st_dev != device:
        os.close(fd)
        raise _Refused(f"{name!r} is on another device")
    return fd


def _empty_files(fd: int) -> str | None:
    """Unlink every non-directory in ``fd``; the name of one subdirectory
    left, or None when none is."""
    with os.scandir(fd) as listing:
        entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
    child = None
    for name, is_directory in entries:
        if is_directory:
            child = name
        else:
            os.unlink(name, dir_fd=fd)
    return child
