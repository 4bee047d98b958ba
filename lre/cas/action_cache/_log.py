"""The file behind ``FilesystemActionCache``: one append-only log of records.

A result is stored with one ``write`` at the end of ``<dir>/actions.log``
(a file per entry cost ext4 an inode, a rename and a journal write each
time: about 0.6 ms of lre's CPU per executed action). Each record is

    magic b"lAC1" | key length (u16) | value length (u32) | CRC-32 (u32) | key | value

little-endian, where the key is ``<hash>-<size>`` of the action digest and the
CRC covers key and value. The newest record of a key wins. The index (key ->
where its value lies) is kept in memory and rebuilt by reading the log when
the cache is opened.

What can go wrong and what happens:

- A crash (lre SIGKILLed, power loss) in the middle of a write leaves a torn
  last record. ``scan`` ends after the last sound record; ``open`` cuts the
  file there, so the next append starts clean. The records before it are kept.
- A record damaged on disk (a flipped byte in its header, key or value) reads
  as absent: ``scan`` skips it by searching for the next magic that starts a
  sound record (its bytes count as dead until the next compaction), so the
  records after it are kept; ``read`` checks the CRC again and forgets a key
  damaged after the scan. A cache never serves bytes it cannot vouch for.
- A short write (disk full) is cut off again and raised as ``OSError``.
- Another process appending to the same file (two lre configurations naming
  one directory) is noticed from the file offsets: its records are not
  indexed here, and this log stops compacting, so neither side loses records.

Not thread-safe by itself: ``FilesystemActionCache`` makes every call from
the Trio thread, or from one thread while it holds its lock.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

LOG_NAME = "actions.log"
MAGIC = b"lAC1"
HEADER = struct.Struct("<4sHII")
#: Longest key accepted when reading ("<64 hex>-<size>" is at most 81 bytes).
MAX_KEY = 128
_CHUNK = 1 << 20

#: Where a value lies: (offset of the value, its length, the record's CRC).
Slot = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Scanned:
    """What a scan of a log found: each live key's slot, and where the valid
    records end (``end`` < ``size`` when the file has a torn or damaged tail)."""

    index: dict[str, Slot]
    end: int
    size: int
    dead_bytes: int


def encode(key: bytes, value: bytes) -> tuple[bytes, int]:
    """The record for ``key`` and ``value``, and its CRC."""
    crc = zlib.crc32(value, zlib.crc32(key))
    return HEADER.pack(MAGIC, len(key), len(value), crc) + key + value, crc


class _Window:
    """Reads a file through one sliding buffer of about ``_CHUNK`` bytes."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.buffer = b""
        self.start = 0  # file offset of buffer[0]

    def cover(self, pos: int, length: int) -> bool:
        """Make ``[pos, pos + length)`` readable from ``buffer``; False when the
        file (as read now) is shorter."""
        have = self.start + len(self.buffer)
        if pos < self.start or pos + length > have:
            keep = self.buffer[pos - self.start :] if self.start <= pos < have else b""
            at = pos + len(keep)
            self.buffer = keep + os.pread(self.fd, max(pos + length - at, _CHUNK), at)
            self.start = pos
        return pos + length <= self.start + len(self.buffer)

    def find(self, needle: bytes, pos: int) -> int:
        """Offset of the next ``needle`` at or after ``pos``; -1 when none."""
        while pos + len(needle) <= self.size:
            if not self.cover(pos, len(needle)):
                return -1
            found = self.buffer.find(needle, pos - self.start)
            if found >= 0:
                return self.start + found
            pos = self.start + len(self.buffer) - len(needle) + 1
        return -1


def _record_at(window: _Window, pos: int) -> tuple[bytes, int, int, int, int] | None:
    """(key, value offset, value length, CRC, record length) of a sound record
    starting at ``pos``; None when its header or CRC does not hold."""
    if not window.cover(pos, HEADER.size):
        return None
    magic, key_len, value_len, crc = HEADER.unpack_from(window.buffer, pos - window.start)
    total = HEADER.size + key_len + value_len
    if magic != MAGIC or key_len == 0 or key_len > MAX_KEY or pos + total > window.size:
        return None
    if not window.cover(pos, total):
        return None
    at = pos - window.start + HEADER.size
    key = window.buffer[at : at + key_len]
    value = memoryview(window.buffer)[at + key_len : at + key_len + value_len]
    if zlib.crc32(value, zlib.crc32(key)) != crc:
        return None
    return key, pos + HEADER.size + key_len, value_len, crc, total


def _records(fd: int, size: int) -> Iterator[tuple[bytes, int, int, int]]:
    """(key, value offset, value length, CRC) of each sound record of ``fd``.

    A record whose header or CRC does not hold is skipped by searching for
    the next magic that starts a sound record (a damaged record in the middle
    costs only itself); the scan ends where no sound record follows."""
    window = _Window(fd, size)
    pos = 0
    while pos + HEADER.size <= size:
        record = _record_at(window, pos)
        if record is None:
            pos = window.find(MAGIC, pos + 1)
            if pos < 0:
                return
            continue
        key, value_at, value_len, crc, total = record
        yield key, value_at, value_len, crc
        pos += total


def scan(fd: int) -> Scanned:
    """Index the records of the log open at ``fd``; reads the whole file."""
    size = os.fstat(fd).st_size
    index: dict[str, Slot] = {}
    live = 0  # bytes of every sound record up to ``end``
    end = 0
    for key, value_at, value_len, crc in _records(fd, size):
        name = key.decode("ascii", "replace")
        old = index.get(name)
        if old is not None:
            live -= HEADER.size + len(key) + old[1]
        index[name] = (value_at, value_len, crc)
        live += HEADER.size + len(key) + value_len
        end = value_at + value_len
    # superseded records and damaged bytes before ``end`` are dead alike
    return Scanned(index, end, size, end - live)


class ActionLog:
    """The log at ``<directory>/actions.log`` and its in-memory index."""

    #: Dead bytes (superseded, forgotten or damaged records) below which the
    #: log is not rewritten, however small its live part.
    compact_after_dead_bytes = 16 << 20

    def __init__(self, directory: str, *, fsync: bool = False) -> None:
        self.directory = directory
        self.path = f"{directory}/{LOG_NAME}"
        self.fsync = fsync
        self.fd = -1
        self.index: dict[str, Slot] = {}
        self.end = 0
        self.live_bytes = 0
        self.dead_bytes = 0
        #: Another process appended to the file: never compact it.
        self.shared = False

    def open(self) -> None:
        """Open (creating) the log, index it and cut a torn tail. ``OSError``
        propagates (the cache cannot be used)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            found = scan(fd)
            if found.end < found.size:
                log.warning(
                    "action cache %s: cut %d bytes of a torn or damaged record at offset %d",
                    self.path,
                    found.size - found.end,
                    found.end,
                )
                os.ftruncate(fd, found.end)
        except BaseException:
            os.close(fd)
            raise
        self._install(fd, found.index, found.end, found.dead_bytes)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _install(self, fd: int, index: dict[str, Slot], end: int, dead: int) -> None:
        old, self.fd = self.fd, fd
        self.index = index
        self.end = end
        self.dead_bytes = dead
        self.live_bytes = sum(slot[1] for slot in index.values())
        if old >= 0:
            os.close(old)

    def append(self, key: str, value: bytes) -> None:
        """Add a record for ``key`` (replacing its older one in the index).
        ``OSError`` (ENOSPC included) leaves the index as it was."""
        raw = key.encode("ascii")
        record, crc = encode(raw, value)
        written = os.write(self.fd, record)
        after = os.lseek(self.fd, 0, os.SEEK_CUR)  # O_APPEND: the end of our record
        begin = after - written
        if written != len(record):
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, begin)
            raise OSError(errno.ENOSPC, f"short write to {self.path}")
        if begin != self.end:
            self.shared = True
        self.end = after
        old = self.index.get(key)
        if old is not None:
            self.dead_bytes += HEADER.size + len(raw) + old[1]
            self.live_bytes -= old[1]
        self.index[key] = (begin + HEADER.size + len(raw), len(value), crc)
        self.live_bytes += len(value)

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def read(self, key: str) -> bytes | None:
        """The value of ``key``; ``None`` when absent or when its bytes no
        longer match their CRC (the key is then forgotten)."""
        slot = self.index.get(key)
        if slot is None:
            return None
        offset, length, crc = slot
        data = os.pread(self.fd, length, offset)
        if len(data) != length or zlib.crc32(data, zlib.crc32(key.encode("ascii"))) != crc:
            log.warning("action cache %s: entry %s is damaged; dropped", self.path, key)
            self.forget(key)
            return None
        return data

    def forget(self, key: str) -> None:
        slot = self.index.pop(key, None)
        if slot is not None:
            self.live_bytes -= slot[1]
            self.dead_bytes += HEADER.size + len(key) + slot[1]

    def wants_compaction(self, max_bytes: int | None) -> bool:
        """Whether dead records (or entries beyond ``max_bytes``) are worth a rewrite."""
        if self.shared:
            return False
        if max_bytes is not None and self.live_bytes > max_bytes:
            return True
        return self.dead_bytes > max(self.compact_after_dead_bytes, self.live_bytes)

    def compacted(self, keep_bytes: int | None, scratch: str) -> tuple[int, dict[str, Slot], int]:
        """(Blocking) write the live records, newest ``keep_bytes`` of values
        at most, to ``scratch``, then rename it over the log. Returns the new
        file's fd, index and end for ``install_compacted``; the old fd still
        reads the old records until then. ``OSError`` leaves the log as it was
        (and ``scratch`` removed)."""
        order = sorted(self.index.items(), key=lambda item: item[1][0])
        if keep_bytes is not None:
            total = 0
            first = len(order)
            while first > 0 and total + order[first - 1][1][1] <= keep_bytes:
                first -= 1
                total += order[first][1][1]
            order = order[first:]
        fd = os.open(
            scratch, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        try:
            index: dict[str, Slot] = {}
            pending: list[bytes] = []
            pending_bytes = 0
            pos = 0
            for key, (offset, length, crc) in order:
                value = os.pread(self.fd, length, offset)
                raw = key.encode("ascii")
                if len(value) != length or zlib.crc32(value, zlib.crc32(raw)) != crc:
                    continue  # damaged: not carried over
                record, _ = encode(raw, value)
                index[key] = (pos + HEADER.size + len(raw), length, crc)
                pos += len(record)
                pending.append(record)
                pending_bytes += len(record)
                if pending_bytes >= _CHUNK:
                    _write_all(fd, b"".join(pending))
                    pending, pending_bytes = [], 0
            _write_all(fd, b"".join(pending))
            if self.fsync:
                os.fsync(fd)
            os.rename(scratch, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(scratch)
            raise
        return fd, index, pos

    def install_compacted(self, fd: int, index: dict[str, Slot], end: int) -> None:
        """Switch to the file ``compacted`` wrote (closes the old one)."""
        self._install(fd, index, end, 0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
