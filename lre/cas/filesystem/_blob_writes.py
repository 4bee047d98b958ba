"""``BlobWriter``: how ``FilesystemStore`` puts bytes and files into place.

Every method blocks (a worker thread, or the event loop for small calls) and
knows nothing of the store's index, LRU or pins. A blob reaches its final
path only through a temp file in ``temp_path`` renamed into place after its
size and hash were verified (``TempFile``), or, for an action's output file
the store adopts, by a ``rename`` of that very file after its mode was set.
With ``fsync`` the file is synced before the rename and its directory after.

Errors: ENOSPC, EDQUOT, EMFILE and ENFILE become ``ResourceExhausted``, and
nothing partial is left behind; a source file that vanished or shrank while
being copied raises ``FileNotFoundError``; other ``OSError``s propagate.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat

from lre.cas._verify import BlobVerifier
from lre.cas.filesystem._blob_files import PLAIN_MODE, TempFile, fsync_dir, space_error, touch_all
from lre.digest import Digest
from lre.errors import InvalidArgument


class BlobWriter:
    """Writes into a store whose uploads in progress live in ``temp_path``."""

    def __init__(self, temp_path: str, *, fsync: bool) -> None:
        self.temp_path = temp_path
        self.fsync = fsync

    def new_temp(self, digest: Digest) -> TempFile:
        """A fresh, empty temp file for ``digest``."""
        path = f"{self.temp_path}/{secrets.token_hex(12)}.tmp"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise (space_error(error, f"writing blob {digest}") or error) from None
        return TempFile(path, fd, digest, self.fsync)

    def write_small(
        self,
        digest: Digest,
        verifier: BlobVerifier,
        pending: list[bytes],
        final: str,
        touched: list[str],
    ) -> None:
        """Verify ``pending`` (the whole blob) and store it as the plain variant
        at ``final``; then save the access times of ``touched``. Raises the
        verifier's ``InvalidArgument`` on a size or hash mismatch."""
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        verifier.update(data)
        verifier.finish()
        self._store(digest, data, final)
        touch_all(touched)

    def copy_variant(self, digest: Digest, source: str | None, final: str, mode: int) -> None:
        """Store a copy of ``source`` (or an empty file when None) at ``final``
        with ``mode``: a kernel copy when the kernel can, else a read."""
        temp = self.new_temp(digest)
        try:
            if source is not None:
                with open(source, "rb") as src:
                    assert temp.fd is not None
                    if not _kernel_copy(src.fileno(), temp.fd, digest, source):
                        os.lseek(temp.fd, 0, os.SEEK_SET)
                        os.ftruncate(temp.fd, 0)
                        temp.append_verified(src.read())
            temp.commit_verified(final, mode)
        except BaseException:
            temp.discard()
            raise

    def copy_trusted(self, digest: Digest, source_fd: int, final: str, mode: int) -> None:
        """Store the first ``digest.size_bytes`` bytes of the open file
        ``source_fd`` at ``final`` with ``mode``, unread by Python and
        unhashed: the caller vouches that they are ``digest``. A kernel copy
        (``copy_file_range``, else ``sendfile``), read as a last resort.
        Raises ``InvalidArgument`` (nothing stored) when the file is shorter."""
        temp = self.new_temp(digest)
        try:
            assert temp.fd is not None
            if not _kernel_copy(source_fd, temp.fd, digest, None):
                os.lseek(temp.fd, 0, os.SEEK_SET)
                os.ftruncate(temp.fd, 0)
                data = os.pread(source_fd, digest.size_bytes, 0)
                if len(data) != digest.size_bytes:
                    raise InvalidArgument(f"output for {digest} shrank after it was hashed")
                temp.append_verified(data)
            temp.commit_verified(final, mode)
        except BaseException:
            temp.discard()
            raise

    def move_in(self, digest: Digest, source: str, final: str, mode: int) -> None:
        """Move the (already hashed) file ``source`` to ``final`` with ``mode``;
        across filesystems, copy it and remove the source.

        Raises ``InvalidArgument`` (nothing changed) when ``source`` is not a
        regular file with a single link owned by lre's user: renaming or
        chmodding a file linked from elsewhere would change that file too.
        """
        info = os.lstat(source)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
            raise InvalidArgument(
                f"output {source!r} is linked from elsewhere or not lre's own file; "
                "it must be copied into the CAS, not moved"
            )
        try:
            os.chmod(source, mode)
            if self.fsync:
                fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.rename(source, final)
        except OSError as error:
            space = space_error(error, f"storing output {digest}")
            if space is not None:
                raise space from None
            if error.errno != errno.EXDEV:
                raise
            self.copy_variant(digest, source, final, mode)
            os.unlink(source)
            return
        if self.fsync:
            fsync_dir(os.path.dirname(final))

    def _store(self, digest: Digest, data: bytes, final: str) -> None:
        temp = self.new_temp(digest)
        try:
            temp.append_verified(data)
            temp.commit_verified(final, PLAIN_MODE)
        except BaseException:
            temp.discard()
            raise


def _kernel_copy(source_fd: int, target_fd: int, digest: Digest, source: str | None) -> bool:
    """Copy ``digest.size_bytes`` bytes from offset 0 of ``source_fd`` to
    ``target_fd`` in the kernel: ``copy_file_range``, ``sendfile`` where
    that is refused across filesystems. False (``target_fd`` partly written)
    when neither works for these files. A source that ends early raises
    ``FileNotFoundError`` naming ``source`` (a store file: treated as gone),
    or ``InvalidArgument`` for an output (``source`` None)."""
    size = digest.size_bytes
    copied = 0

    def copy_range(count: int) -> int:
        return os.copy_file_range(source_fd, target_fd, count, copied)

    def send(count: int) -> int:
        return os.sendfile(target_fd, source_fd, copied, count)

    for call in (copy_range, send):
        try:
            while copied < size:
                n = call(size - copied)
                if n == 0:
                    if source is not None:
                        raise FileNotFoundError(source)  # truncated: treat as gone
                    raise InvalidArgument(f"output for {digest} shrank after it was hashed")
                copied += n
            return True
        except OSError as error:
            if isinstance(error, FileNotFoundError):
                raise
            space = space_error(error, f"copying blob {digest}")
            if space is not None:
                raise space from None
            if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
    return False
