"""Leftovers lre cannot delete, moved aside so that they never block it.

An action can leave something in its directory that lre is unable to remove:
a file made immutable (``chattr +i``), a directory of another user, a mount
that cannot be detached. Rather than failing (at start-up that would keep
lre from starting at all), such an entry is renamed into the worker's
quarantine directory, ``{work_directory}/{worker}/.quarantine/``, as
``{name}.{unix time in ns}``, with a ``{that}.why`` text file next to it
saying what stopped its removal. A rename stays on the worker's filesystem
and moves a directory with whatever is mounted below it.

Quarantined entries are retried when the worker starts and every
``RETRY_S`` seconds by the action-directory janitor; each one removed is
logged. ``quarantined(worker_directory)`` lists what is there (for start-up
logs, ``lre doctor`` and ``lre cache``), reading the directory only.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from lre.worker.directories._removal import MountTable, remove_tree

__all__ = ["QUARANTINE_NAME", "Quarantine", "QuarantinedEntry", "quarantined"]

log = logging.getLogger(__name__)

QUARANTINE_NAME = ".quarantine"
#: How often the janitor tries to remove quarantined entries again.
RETRY_S = 600.0
_WHY = ".why"


@dataclass(frozen=True, slots=True)
class QuarantinedEntry:
    """One entry of a quarantine directory and why it is there."""

    path: Path
    reason: str


def quarantined(worker_directory: Path) -> list[QuarantinedEntry]:
    """What ``worker_directory``'s quarantine holds, oldest first (none when
    it has no quarantine). Never raises for a missing or unreadable one."""
    where = worker_directory / QUARANTINE_NAME
    try:
        if not stat.S_ISDIR(os.lstat(where).st_mode):  # never a symlink's target
            return []
        names = sorted(os.listdir(where))
    except OSError:
        return []
    entries = []
    for name in names:
        if name.endswith(_WHY):
            continue
        try:
            reason = (where / (name + _WHY)).read_text(errors="replace").strip()
        except OSError:
            reason = "unknown"
        entries.append(QuarantinedEntry(where / name, reason))
    return entries


class Quarantine:
    """The quarantine of one worker directory (which lre holds locked)."""

    def __init__(self, worker_directory: Path, mounts: MountTable | None = None) -> None:
        self.path = worker_directory / QUARANTINE_NAME
        self.mounts = mounts if mounts is not None else MountTable()

    def clear(self, path: Path) -> bool:
        """Remove ``path`` (detaching mounts below it first if any), or move it
        into the quarantine when that fails. False only when it could be
        neither removed nor moved (logged; it stays where it is)."""
        error = self.remove(path)
        if error is None:
            return True
        return self.move(path, error)

    def remove(self, path: Path) -> OSError | None:
        """Try to remove ``path``; the error that stopped it, or None."""
        try:
            remove_tree(path)
            return None
        except OSError as error:
            first = error
        # A mount below it: detach (deepest first) and try once more.
        if not self.mounts.below(path) or self.mounts.detach_below(path):
            return first
        try:
            remove_tree(path)
        except OSError as error:
            return error
        return None

    def move(self, path: Path, error: OSError) -> bool:
        """Rename ``path`` into the quarantine, recording ``error``; False when
        the rename fails (logged)."""
        reason = f"{error.strerror or error}: {error.filename or path}"
        if error.filename is None and error.strerror is None:
            reason = str(error)
        try:
            self._make()
            target = self.path / f"{path.name}.{time.time_ns()}"
            os.rename(path, target)
        except OSError as failure:
            log.error(
                "cannot remove %s (%s) nor move it into %s (%s); it stays, and its name "
                "is not reused",
                path,
                reason,
                self.path,
                failure,
            )
            return False
        try:
            (self.path / (target.name + _WHY)).write_text(reason + "\n")
        except OSError:
            pass
        log.warning(
            "could not remove %s (%s); moved it to %s. See 'Quarantined leftovers' in "
            "docs/troubleshooting.md",
            path,
            reason,
            target,
        )
        return True

    def _make(self) -> None:
        """Make the quarantine a real directory of lre's (a symlink or file in
        its place is removed first, never followed)."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            os.mkdir(self.path, 0o700)
            return
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(self.path)
            os.mkdir(self.path, 0o700)

    def entries(self) -> list[QuarantinedEntry]:
        return quarantined(self.path.parent)

    def retry(self) -> list[QuarantinedEntry]:
        """Try to remove every quarantined entry again; returns those left."""
        left = []
        for entry in self.entries():
            error = self.remove(entry.path)
            if error is None:
                log.info("removed quarantined %s", entry.path)
                try:
                    os.unlink(entry.path.with_name(entry.path.name + _WHY))
                except OSError:
                    pass
            else:
                left.append(entry)
        if not left:
            try:
                os.rmdir(self.path)
            except OSError:
                pass
        return left
