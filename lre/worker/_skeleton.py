"""Emptying a finished action's input root while keeping its directories.

Consecutive actions of one build stage nearly the same directories (Bazel's
compiles all have ``bazel-out/<config>/bin/_objs``, ``external/bazel_tools/...``
and so on). Making a directory and removing it again are the most expensive
filesystem calls a small action costs lre: each allocates or frees an inode
and writes the journal (0.1-0.7 ms of kernel CPU apiece on ext4 here, against
~10 us for an unlink). ``scrub_root`` therefore removes every file, symlink
and other non-directory under a finished input root and keeps the
directories, so the next action's staging only makes the directories that
are missing and removes the ones it does not want (``stage_inputs``'s
``existing``).

A directory is kept only when it is certainly what staging would have made:
a real directory (never a symlink, which is unlinked like a file), owned by
lre's user, mode exactly 0755, and without extended attributes (a default ACL
would change the mode of everything the next action creates in it). Anything
else, more than ``MAX_KEPT_DIRECTORIES`` directories, or any failing call
makes ``scrub_root`` return None, and the caller removes the whole tree
instead; what was already unlinked stays unlinked, nothing else is changed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: Larger skeletons are removed: reconciling them with the next tree would
#: cost more than making the few that are needed again.
MAX_KEPT_DIRECTORIES = 256

_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _NotReusable(Exception):
    """Something under the root is not what staging makes."""


def scrub_root(root: Path) -> frozenset[str] | None:
    """Unlink every non-directory under ``root`` and return the relative paths
    (``a``, ``a/b``, ...) of the directories left, all empty; None when the
    tree must be removed instead (see the module docstring). Never follows a
    symlink, never raises ``OSError``."""
    kept: list[str] = []
    try:
        fd = os.open(root, _OPEN_DIRECTORY)
    except OSError:
        return None
    try:
        _check_directory(fd)
        _scrub(fd, "", kept)
    except (OSError, _NotReusable):
        return None
    finally:
        os.close(fd)
    return frozenset(kept)


def _check_directory(fd: int) -> None:
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o755:
        raise _NotReusable
    if os.listxattr(fd):
        raise _NotReusable


def _scrub(fd: int, prefix: str, kept: list[str]) -> None:
    with os.scandir(fd) as listing:
        entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
    for name, is_directory in entries:
        if not is_directory:
            os.unlink(name, dir_fd=fd)
            continue
        relative = prefix + name
        kept.append(relative)
        if len(kept) > MAX_KEPT_DIRECTORIES:
            raise _NotReusable
        child = os.open(name, _OPEN_DIRECTORY, dir_fd=fd)
        try:
            _check_directory(child)
            _scrub(child, relative + "/", kept)
        finally:
            os.close(child)
