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
``existing``). ``plan_directories`` says how: a missing directory is made by
renaming a kept one the new tree does not want (a rename moves a directory
entry and allocates nothing: ~40 us against ~110 us for a mkdir plus ~50 us
for the rmdir it replaces), and only when none is left by ``mkdir``. Builds
alternate between packages (``bin/a/_objs/a`` after ``bin/b/_objs/b``), so
most of what differs between consecutive trees is covered by renames.

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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: Larger skeletons are removed: reconciling them with the next tree would
#: cost more than making the few that are needed again.
MAX_KEPT_DIRECTORIES = 256

_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _NotReusable(Exception):
    """Something under the root is not what staging makes."""


def scrub_root(root: Path, owners: tuple[int, ...] = ()) -> frozenset[str] | None:
    """Unlink every non-directory under ``root`` and return the relative paths
    (``a``, ``a/b``, ...) of the directories left, all empty; None when the
    tree must be removed instead (see the module docstring). Never follows a
    symlink, never raises ``OSError``. A directory must belong to lre's user
    or one of ``owners`` (the user actions run as, who owns what staging
    made for it)."""
    accepted = (os.geteuid(), *owners)
    kept: list[str] = []
    try:
        fd = os.open(root, _OPEN_DIRECTORY)
    except OSError:
        return None
    try:
        _check_directory(fd, accepted)
        _scrub(fd, "", kept, accepted)
    except (OSError, _NotReusable):
        return None
    finally:
        os.close(fd)
    return frozenset(kept)


def _check_directory(fd: int, accepted: tuple[int, ...]) -> None:
    info = os.fstat(fd)
    if info.st_uid not in accepted or stat.S_IMODE(info.st_mode) != 0o755:
        raise _NotReusable
    if os.listxattr(fd):
        raise _NotReusable


def _scrub(fd: int, prefix: str, kept: list[str], accepted: tuple[int, ...]) -> None:
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
            _check_directory(child, accepted)
            _scrub(child, relative + "/", kept, accepted)
        finally:
            os.close(child)


@dataclass(frozen=True, slots=True)
class DirectoryPlan:
    """How to turn a scrubbed root's directories into the ones an action needs.

    Apply ``steps`` in order (``(source, target)``: rename ``source`` to
    ``target``, or ``mkdir`` ``target`` when ``source`` is None), then
    ``rmdir`` each of ``removals`` in order. Every parent exists when its
    turn comes and every directory moved or removed is empty by then.
    """

    steps: list[tuple[str | None, str]]
    removals: list[str]

    def __len__(self) -> int:
        return len(self.steps) + len(self.removals)


def plan_directories(existing: frozenset[str], needed: Iterable[str]) -> DirectoryPlan:
    """The plan for a root holding exactly the empty directories ``existing``
    (as ``scrub_root`` returned them) to hold ``needed``, which must list
    every directory after its parent (root excluded).

    A needed directory that is missing takes the place of an unwanted one
    with no subdirectories left, if any (see the module docstring); the
    unwanted ones left over are removed deepest first. Pure: touches nothing.
    """
    needed = list(needed)
    spare = set(existing.difference(needed))
    # Unwanted directories never hold wanted ones (``needed`` includes every
    # parent), so counting spare children is enough to find empty ones.
    children = Counter(os.path.dirname(path) for path in spare)
    leaves = sorted((path for path in spare if not children[path]), reverse=True)
    steps: list[tuple[str | None, str]] = []
    for target in needed:
        if target in existing:
            continue
        if not leaves:
            steps.append((None, target))
            continue
        source = leaves.pop()
        spare.discard(source)
        parent = os.path.dirname(source)
        children[parent] -= 1
        if parent in spare and not children[parent]:
            leaves.append(parent)
        steps.append((source, target))
    removals = sorted(spare, key=lambda path: path.count("/"), reverse=True)
    return DirectoryPlan(steps, removals)
