"""Noticing hardlinked inputs that an action altered.

Staged inputs are hardlinks to the filesystem CAS's own files (one inode per
content and exec bit), and an action runs as the user owning them, so it can
``chmod u+w`` an input and write to it, or chmod it: that changes the CAS
copy itself. Nothing cheap prevents it for the same user (see
docs/security.md); instead the change is detected and the blob withdrawn.

At staging, each distinct linked CAS file is recorded with a ``Snapshot``
(device, inode, mode, size, mtime in ns; not ctime, which every new link
changes). Once the action's process group is gone, ``altered_inputs``
lstat()s each CAS path again: a path that vanished or now holds another
inode (evicted, replaced) is not ours to judge; the same inode with another
mode or size was altered through the action. When only the mtime moved,
the file is hashed: the store itself sets mtimes to record uses (a batch
of them can land while an action runs), so a new mtime over the right bytes
is not an alteration, and one over other bytes is. Any change, a chmod
alone included, counts as taint: the worker discards the whole blob from the
store (``FilesystemStore.discard``), so it is never served again and the
client re-uploads it when a later action reports it missing; a fresh upload
gets a fresh inode with the right mode.

Limits: actions running at the same time as the culprit may already have
read the altered bytes; and an action that deliberately restores the mtime
(``touch -d``) after writing the same number of bytes is not detected.
"""

from __future__ import annotations

import hashlib
import os
from typing import NamedTuple

from lre.digest import Digest


class Snapshot(NamedTuple):
    """What a linked CAS file looked like when it was staged."""

    device: int
    inode: int
    mode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str) -> Snapshot:
        """lstat ``path``; raises ``OSError`` when it cannot be read."""
        st = os.lstat(path)
        return cls(st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns)


#: (digest, executable) -> (CAS path that was linked, its snapshot then)
LinkedInputs = dict[tuple[Digest, bool], tuple[str, Snapshot]]

#: Up to this many linked files are checked on the event loop (a thread
#: round trip costs more than a few dozen lstat calls).
SMALL_CHECK = 64


def altered_inputs(linked: LinkedInputs) -> list[tuple[Digest, bool]]:
    """The linked inputs whose CAS inode changed since staging.

    Blocking (one lstat per entry). A path that is gone or holds another
    inode is skipped; other lstat errors propagate.
    """
    altered: list[tuple[Digest, bool]] = []
    for key, (path, before) in linked.items():
        try:
            now = Snapshot.of(path)
        except FileNotFoundError:
            continue
        if (now.device, now.inode) != (before.device, before.inode):
            continue
        if now == before:
            continue
        if now._replace(mtime_ns=before.mtime_ns) == before and _holds(path, key[0]):
            continue
        altered.append(key)
    return altered


def _holds(path: str, digest: Digest) -> bool:
    """Whether the file at ``path`` (not followed if a symlink) hashes to
    ``digest``; False when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        hasher = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, 1 << 20):
            hasher.update(chunk)
            size += len(chunk)
    except OSError:
        return False
    finally:
        os.close(fd)
    return size == digest.size_bytes and hasher.hexdigest() == digest.hash
