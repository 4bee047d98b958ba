"""Checking that received bytes match the digest they were sent under."""

from __future__ import annotations

import hashlib

from lre.digest import Digest
from lre.errors import InvalidArgument


class BlobVerifier:
    """Counts and hashes the chunks of one blob as they arrive.

    ``update`` raises ``InvalidArgument`` as soon as more bytes than
    ``digest.size_bytes`` arrive (when ``verify_size``); ``finish`` raises
    ``InvalidArgument`` naming the digest when the total size or the SHA256
    differs. Nothing is stored here; stores call ``finish`` before making a
    blob visible.
    """

    __slots__ = ("_hasher", "_received", "digest", "verify_hash", "verify_size")

    def __init__(
        self, digest: Digest, *, verify_size: bool = True, verify_hash: bool = True
    ) -> None:
        self.digest = digest
        self.verify_size = verify_size
        self.verify_hash = verify_hash
        self._hasher = hashlib.sha256() if verify_hash else None
        self._received = 0

    @property
    def received(self) -> int:
        """Bytes seen so far."""
        return self._received

    def check_total(self, total: int) -> None:
        """Raise ``InvalidArgument`` if ``total`` bytes would exceed the size."""
        if self.verify_size and total > self.digest.size_bytes:
            raise InvalidArgument(
                f"blob {self.digest}: received more than the expected "
                f"{self.digest.size_bytes} bytes (at least {total})"
            )

    def update(self, chunk: bytes | memoryview) -> None:
        """Account one chunk. Raises ``InvalidArgument`` on too many bytes."""
        self._received += len(chunk)
        self.check_total(self._received)
        if self._hasher is not None:
            self._hasher.update(chunk)

    def finish(self) -> None:
        """Raise ``InvalidArgument`` unless size and hash match the digest."""
        if self.verify_size and self._received != self.digest.size_bytes:
            raise InvalidArgument(
                f"blob {self.digest}: received {self._received} bytes, "
                f"expected {self.digest.size_bytes}"
            )
        if self._hasher is not None:
            actual = self._hasher.hexdigest()
            if actual != self.digest.hash:
                raise InvalidArgument(
                    f"blob {self.digest}: data hashes to {actual}, expected {self.digest.hash}"
                )


def check_read_range(digest: Digest, offset: int, limit: int | None) -> int:
    """Validate a read of ``digest`` and return how many bytes it covers.

    Raises ``OutOfRange`` when ``offset`` is negative or past the size
    (``offset == size`` is an empty read) and ``InvalidArgument`` when
    ``limit`` is negative.
    """
    from lre.errors import OutOfRange

    if offset < 0:
        raise OutOfRange(f"read offset {offset} of blob {digest} is negative")
    if offset > digest.size_bytes:
        raise OutOfRange(
            f"read offset {offset} of blob {digest} is past its size {digest.size_bytes}"
        )
    if limit is not None and limit < 0:
        raise InvalidArgument(f"read limit {limit} of blob {digest} is negative")
    remaining = digest.size_bytes - offset
    return remaining if limit is None else min(limit, remaining)
