"""The history file: a bounded, append-only ring of JSON lines in lre's state dir.

Two segments, ``history.jsonl`` (being written) and ``history.1.jsonl``
(the one before): when the current segment reaches half of ``max_bytes`` it
replaces the older one, so the pair never holds more than about
``max_bytes``. Each line is one ``HistoryLine`` (an action, a host sample,
a build's span or a start of lre; ``lre.snapshot._history``).

A crash can leave a torn last line. ``HistoryFile`` cuts it off when it
opens the file (so the next line starts clean), and ``read_history`` skips
every line that does not parse as a record (torn, damaged, or written by a
newer lre), so reading never fails because of one line. Both work without
lre running: ``lre history``/``builds``/``trace``/``report`` read the
files directly.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from lre.snapshot._history import HistoryLine, record_from_json

__all__ = ["CURRENT_NAME", "OLDER_NAME", "HistoryFile", "read_history"]

CURRENT_NAME = "history.jsonl"
OLDER_NAME = "history.1.jsonl"


class HistoryFile:
    """Appends lines to the ring in ``directory`` (made if missing, mode 0700).

    Not thread-safe: one writer (the recorder's flushing thread). Every
    method raises ``OSError`` as the filesystem does (ENOSPC, EACCES, ...);
    the caller decides to stop recording; nothing is left half-rotated that
    the reader cannot read.
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        if max_bytes < 4096:
            raise ValueError(f"history max_bytes must be >= 4096, got {max_bytes}")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.current = self.directory / CURRENT_NAME
        self.older = self.directory / OLDER_NAME
        self._fd = -1
        self._size = 0

    def open(self) -> None:
        """Open (and cut a torn tail of) the current segment now rather than at
        the first ``append``, so lre holds its descriptor from the start; does
        nothing when open. Raises ``OSError`` as the filesystem does."""
        if self._fd < 0:
            self._open()

    def _open(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.current, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size:
                size = _cut_torn_tail(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._size = fd, size

    def append(self, lines: Sequence[str]) -> int:
        """Write ``lines`` (each without its newline) at the end; returns bytes written."""
        if not lines:
            return 0
        if self._fd < 0:
            self._open()
        if self._size >= self.max_bytes // 2:
            self._rotate()
        data = ("\n".join(lines) + "\n").encode()
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
            self._size += written
        return len(data)

    def _rotate(self) -> None:
        os.replace(self.current, self.older)
        self.close()
        self._open()

    def size_on_disk(self) -> int:
        """Bytes both segments take (their lengths)."""
        total = 0
        for path in (self.current, self.older):
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                pass
        return total

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _cut_torn_tail(fd: int, size: int) -> int:
    """Truncate after the last newline (a crash's partial line); the new size."""
    block = 65536
    end = size
    while end > 0:
        start = max(0, end - block)
        chunk = os.pread(fd, end - start, start)
        at = chunk.rfind(b"\n")
        if at >= 0:
            keep = start + at + 1
            if keep != size:
                os.ftruncate(fd, keep)
            return keep
        end = start
    os.ftruncate(fd, 0)
    return 0


def read_history(directory: str | os.PathLike[str]) -> Iterator[HistoryLine]:
    """Every record in the ring, oldest first; lines that are not records are
    skipped, and so is a segment that is not a regular file. A missing
    directory or file reads as empty; other ``OSError``s
    (permissions) propagate."""
    base = Path(directory)
    for name in (OLDER_NAME, CURRENT_NAME):
        try:
            handle = open(base / name, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            continue
        with handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                continue  # a device or a pipe is never a history (it may never end)
            for raw in handle:
                try:
                    data = json.loads(raw)
                    if isinstance(data, dict):
                        yield record_from_json(data)
                except ValueError:  # torn, damaged, or a kind this lre does not know
                    continue
