"""Rebuilding ``FilesystemStore``'s index from its directories at ``open``.

``scan_content`` runs in a worker thread. It creates ``content_path`` (with
its 256 shard directories) and ``temp_path`` when missing, empties
``temp_path`` (uploads a crash interrupted), removes every content file that
is not a well-formed blob file (wrong name, wrong shard, not a regular file,
or a size different from the one in its name: a partial file from a power
loss without fsync), and returns the index entries of the blobs found, least
recently used first (by file mtime).

Index entries are plain ints, ``size << 2 | variants`` with the variant bits
``PLAIN_VARIANT`` and ``EXEC_VARIANT``: no per-blob object, so 100k blobs
cost the garbage collector nothing.

Raises ``FailedPrecondition`` when the two paths are on different
filesystems (blobs move from one to the other by ``rename``); other
``OSError``s propagate.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass

from lre.cas.filesystem._leftovers import remove_leftover
from lre.errors import FailedPrecondition

PLAIN_VARIANT = 1
EXEC_VARIANT = 2

#: Content file names: ``<hash>-<size>`` and ``<hash>-<size>.x``.
CONTENT_NAME = re.compile(r"([0-9a-f]{64})-(0|[1-9][0-9]{0,15})(\.x)?")


def entry_bytes(entry: int) -> int:
    """Bytes on disk of an index entry: its size once per variant file."""
    return (entry >> 2) * ((entry & 1) + (entry >> 1 & 1))


def scan_content(content_path: str, temp_path: str) -> list[tuple[str, int]]:
    """(thread) ``(hash, entry)`` of every blob on disk, least recently used
    first; see the module docstring for what is created and removed."""
    return [(h, entry) for h, entry, _ in scan_content_used(content_path, temp_path)]


def scan_content_used(content_path: str, temp_path: str) -> list[tuple[str, int, float]]:
    """(thread) ``scan_content`` with each blob's last use (its newest file
    mtime, seconds since the epoch) as a third item."""
    os.makedirs(content_path, mode=0o700, exist_ok=True)
    os.makedirs(temp_path, mode=0o700, exist_ok=True)
    if os.stat(content_path).st_dev != os.stat(temp_path).st_dev:
        raise FailedPrecondition(
            "filesystem store: content_path and temp_path must be on the same "
            f"filesystem ({content_path!r}, {temp_path!r})"
        )
    _empty(temp_path)
    found, mtimes, junk = _walk(content_path, create_shards=True)
    for path in junk:
        _remove(path)
    return [(h, found[h], mtimes[h] / 1e9) for h in sorted(mtimes, key=mtimes.__getitem__)]


@dataclass(frozen=True, slots=True)
class ContentUsage:
    """How many blobs (or entries) a directory holds and their bytes on disk."""

    count: int
    stored_bytes: int


def content_usage(content_path: str) -> ContentUsage:
    """(thread) The well-formed blob files under ``content_path``, counted
    without changing anything (no directory created, no file removed), so
    it is safe while a server has the store open. Both variants of a blob
    count as one blob and add their bytes. A missing ``content_path`` holds
    nothing; other ``OSError``s propagate."""
    if not os.path.isdir(content_path):
        return ContentUsage(0, 0)
    found, _, _ = _walk(content_path, create_shards=False)
    return ContentUsage(len(found), sum(map(entry_bytes, found.values())))


def _walk(
    content_path: str, *, create_shards: bool
) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """Entries by hash, their newest mtime, and the paths that are not
    well-formed blob files. Missing shard directories are created when
    ``create_shards``, else skipped."""
    found: dict[str, int] = {}  # hash -> size << 2 | variants
    mtimes: dict[str, int] = {}
    junk: list[str] = []
    match = CONTENT_NAME.fullmatch
    for prefix in range(256):
        shard = f"{content_path}/{prefix:02x}"
        try:
            items = os.scandir(shard)
        except FileNotFoundError:
            if create_shards:
                os.mkdir(shard, 0o700)
            continue
        with items:
            for item in items:
                m = match(item.name)
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if (
                    m is None
                    or not stat.S_ISREG(st.st_mode)
                    or st.st_size != int(m[2])
                    or not m[1].startswith(shard[-2:])
                ):
                    junk.append(item.path)
                    continue
                variant = EXEC_VARIANT if m[3] else PLAIN_VARIANT
                h = m[1]
                old = found.get(h)
                if old is None:
                    found[h] = st.st_size << 2 | variant
                    mtimes[h] = st.st_mtime_ns
                else:
                    found[h] = old | variant
                    mtimes[h] = max(mtimes[h], st.st_mtime_ns)
    return found, mtimes, junk


def _empty(directory: str) -> None:
    with os.scandir(directory) as leftovers:
        for item in leftovers:
            if item.is_dir(follow_symlinks=False):
                remove_leftover(item.path)  # no recursion, never crosses a mount
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(item.path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        remove_leftover(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
