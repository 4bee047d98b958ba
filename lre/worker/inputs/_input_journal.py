"""A record, on disk, of the CAS files hardlinked into running actions.

A staged input is the CAS's own inode (``_staging.py``); an action that
writes to it changes the stored blob. ``_input_guard`` notices that when the
action ends and withdraws the blob. If lre dies first (SIGKILL, a crash,
the machine losing power after the journal reached the disk), that check
never runs, and the next lre would serve the altered bytes under the old
digest. So, before an action with linked inputs starts, the CAS files linked
into it are appended to this journal, and a line saying it ended follows the
check. At the next start, before the worker takes work (and so before lre
serves anything), every file of an action that has no end line is hashed
again, and a blob whose file no longer matches its digest is discarded.

Format: one JSON array per line, ``["S", token, hash, size, executable,
path]`` when an action starts and ``["E", token]`` when its check is done;
the file is truncated whenever no action is in flight and it has grown past
``COMPACT_BYTES``. A torn last line (lre died while writing it) is ignored:
its action had not started yet. Each record is one ``write`` on a file opened
with ``O_APPEND``; a write the disk had no room for (``ENOSPC``, or a short
write) is cut off again, so no torn line is left for the next record to be
glued to and lost: the action that wanted to start fails (RESOURCE_EXHAUSTED),
every record before it stays. An end record that finds no room is logged and
dropped (its action is merely checked again at the next start). There is no
fsync (a lost tail after a power failure can only lose records of actions
whose processes died with the machine, before they could write anything more).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from lre.digest import Digest
from lre.worker.inputs._input_guard import LinkedInputs
from lre.worker.outputs import hash_file

__all__ = ["InputJournal", "JournalEntry", "recover_linked_inputs"]

log = logging.getLogger(__name__)

#: Truncate when idle past this size.
COMPACT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """A CAS file linked into an action that had not ended when lre stopped."""

    digest: Digest
    executable: bool
    path: str


class InputJournal:
    """Appends start and end records for one worker (not thread-safe; the
    Trio thread only). Raises ``OSError`` when the file cannot be written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._tokens = 0
        self._open: set[int] = set()
        self._size = os.fstat(self._fd).st_size

    def started(self, linked: LinkedInputs) -> int:
        """Record the files linked into an action about to start; returns the
        token to pass to ``ended``."""
        self._tokens += 1
        token = self._tokens
        lines = "".join(
            json.dumps(["S", token, digest.hash, digest.size_bytes, executable, path]) + "\n"
            for (digest, executable), (path, _) in linked.items()
        ).encode()
        self._write(lines)
        self._open.add(token)
        return token

    def ended(self, token: int) -> None:
        """Record that the action's linked inputs were checked. No room for
        the record is logged, not raised (see the module docstring)."""
        try:
            self._write(json.dumps(["E", token]).encode() + b"\n")
        except OSError as error:
            log.warning("linked-inputs journal %s: end record dropped: %s", self.path, error)
        self._open.discard(token)
        if not self._open and self._size > COMPACT_BYTES:
            os.ftruncate(self._fd, 0)
            self._size = 0

    def _write(self, data: bytes) -> None:
        before = self._size
        try:
            written = os.write(self._fd, data)
        except OSError:
            self._cut(before)
            raise
        if written != len(data):  # a short write to a regular file: disk full
            self._cut(before)
            raise OSError(errno.ENOSPC, "no space left on device (short write)", str(self.path))
        self._size += written

    def _cut(self, size: int) -> None:
        """Drop whatever part of a failed record reached the file."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_unfinished(path: Path) -> list[JournalEntry]:
    """Entries of actions with a start record and no end record in ``path``
    (none when the file does not exist). Malformed lines are skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    started: dict[object, list[JournalEntry]] = {}
    for line in data.splitlines():
        try:
            record = json.loads(line)
            if record[0] == "S":
                _, token, hash_, size, executable, file_path = record
                entry = JournalEntry(
                    Digest(str(hash_), int(size)), bool(executable), str(file_path)
                )
                started.setdefault(token, []).append(entry)
            elif record[0] == "E":
                started.pop(record[1], None)
        except (ValueError, TypeError, IndexError, KeyError):
            continue
    return [entry for entries in started.values() for entry in entries]


async def recover_linked_inputs(
    path: Path, discard: Callable[[Digest, bool], Awaitable[object]] | None
) -> list[JournalEntry]:
    """Hash every file the journal at ``path`` lists for an unfinished
    action, discard (``discard(digest, executable)``) each blob whose file no
    longer matches its digest, then empty the journal. Returns the entries
    discarded. A file that is gone or replaced needs nothing (the store
    checks sizes at start-up and never serves a file it does not hold).
    """

    def check() -> list[JournalEntry]:
        altered: list[JournalEntry] = []
        for entry in read_unfinished(path):
            try:
                digest, _ = hash_file(Path(entry.path))
            except OSError:
                continue
            if digest != entry.digest:
                altered.append(entry)
        return altered

    altered = await trio.to_thread.run_sync(check)
    for entry in altered:
        log.warning(
            "linked input %s (%s) was altered by an action running when lre stopped; "
            "the CAS copy is discarded",
            entry.digest,
            entry.path,
        )
        if discard is not None:
            await discard(entry.digest, entry.executable)
    try:
        os.truncate(path, 0)
    except FileNotFoundError:
        pass
    return altered
