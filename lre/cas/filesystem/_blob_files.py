"""Blocking file primitives of ``FilesystemStore``.

Everything here runs in a worker thread or, for small calls, on the event
loop (``call_inline``); nothing here knows the store's index, LRU or pins:

- ``TempFile``: an upload in progress in ``temp_path``, written, then moved
  into place with one ``rename`` (fsync of file and directory when asked);
  ``discard`` removes it;
- ``read_range`` / ``open_checked``: reads that raise
  ``ShortRead`` when a content file is shorter than its
  digest says, so a lost or truncated file is never served as the blob;
- ``hash_file``: the digest of an output file (``InvalidArgument`` naming the
  path for a symlink or a non-regular file);
- ``unlink_all`` / ``touch_all``: batches that ignore files already gone.

Errors: ENOSPC and EDQUOT while writing become ``ResourceExhausted`` naming
the blob (``space_error``); other ``OSError``s propagate unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat

from lre.cas._verify import BlobVerifier
from lre.digest import Digest
from lre.errors import InvalidArgument, ResourceExhausted, descriptors_exhausted

#: Mode of a blob's plain variant (the executable one is 0o555).
PLAIN_MODE = 0o444
EXEC_MODE = 0o555


def space_error(error: OSError, what: str) -> ResourceExhausted | None:
    """The ``ResourceExhausted`` a write fails with for ``error`` when the
    device is full, the quota spent or lre out of file descriptors (the
    request fails, the client retries, nothing is logged as lre's defect);
    None for any other error."""
    if error.errno == errno.ENOSPC:
        return ResourceExhausted(
            f"filesystem store: no space left on the CAS device while {what}; "
            "free disk space or lower the store's max_bytes"
        )
    if error.errno == errno.EDQUOT:
        return ResourceExhausted(
            f"filesystem store: disk quota exceeded on the CAS device while {what}"
        )
    return descriptors_exhausted(error)


class ShortRead(Exception):
    """A content file is shorter than its digest says (lost or corrupted)."""


class TempFile:
    """An upload in progress in ``temp_path`` (used from worker threads)."""

    __slots__ = ("digest", "fd", "fsync", "path")

    def __init__(self, path: str, fd: int, digest: Digest, fsync: bool) -> None:
        self.path = path
        self.fd: int | None = fd
        self.digest = digest
        self.fsync = fsync

    def append(self, verifier: BlobVerifier, parts: list[bytes]) -> None:
        for part in parts:
            verifier.update(part)
            self.append_verified(part)

    def append_verified(self, data: bytes) -> None:
        assert self.fd is not None
        view = memoryview(data)
        try:
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
        except OSError as error:
            raise (space_error(error, f"writing blob {self.digest}") or error) from None

    def commit(self, verifier: BlobVerifier, final: str, touched: list[str]) -> None:
        verifier.finish()
        self.commit_verified(final, PLAIN_MODE)
        touch_all(touched)

    def commit_verified(self, final: str, mode: int) -> None:
        assert self.fd is not None
        try:
            os.fchmod(self.fd, mode)
            if self.fsync:
                os.fsync(self.fd)
            os.close(self.fd)
            self.fd = None
            os.rename(self.path, final)
        except OSError as error:
            raise (space_error(error, f"writing blob {self.digest}") or error) from None
        if self.fsync:
            fsync_dir(os.path.dirname(final))

    def discard(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_range(path: str, offset: int, length: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    if len(data) != length:
        raise ShortRead(path)
    return data


def open_checked(path: str, size: int) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    if os.fstat(fd).st_size != size:
        os.close(fd)
        raise ShortRead(path)
    return fd


def unlink_all(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def touch_all(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.utime(path)


def hash_file(path: str) -> Digest:
    hasher = hashlib.sha256()
    size = 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise InvalidArgument(f"output {path!r} is a symlink, not a regular file") from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise InvalidArgument(f"output {path!r} is not a regular file")
        while block := f.read(1 << 20):
            hasher.update(block)
            size += len(block)
    return Digest(hasher.hexdigest(), size)
