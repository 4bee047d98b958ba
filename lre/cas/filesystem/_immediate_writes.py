"""``ImmediateWriter``: a filesystem store's small writes done in one call.

``FilesystemStore.write`` is a Trio coroutine over a chunk stream; for a blob
that arrives whole and small (a one-message ByteStream Write, which is how
Bazel and Buck2 send every small missing blob) the task, cancel scope and
streams around it cost more CPU than the file itself. ``write_now`` does the
same work synchronously on the store's own (Trio) thread, from a callback
with no task of its own: verify size and hash, reserve the bytes, write a
temp file and rename it into place (``BlobWriter.write_small``, the very call the
async path makes for a small blob), add it to the index.

It answers ``False`` with nothing changed whenever the async path would wait
or hand work to a thread: a blob over ``INLINE_BYTES``, a store with fsync,
a reservation that needs eviction or would pass the free-disk floor, an
unlink of the same blob in progress, a batch of access times due to be
saved. The caller then uses ``write``.

Failures are those of ``write``: ``InvalidArgument`` naming the digest on a
size or hash mismatch (nothing written), ``ResourceExhausted`` for a blob
larger than the store or a full disk (nothing visible), other ``OSError``s
propagate; the reservation is always given back.
"""

from __future__ import annotations

from collections.abc import Callable

from lre.cas._verify import BlobVerifier
from lre.cas.filesystem._blob_scan import PLAIN_VARIANT
from lre.cas.filesystem._blob_writes import BlobWriter
from lre.cas.filesystem._content_index import ContentIndex
from lre.cas.filesystem._inline import INLINE_BYTES
from lre.digest import Digest


class ImmediateWriter:
    """``ImmediateWrites`` of one filesystem store (call only on its thread)."""

    def __init__(
        self, index: ContentIndex, writer: BlobWriter, check_open: Callable[[], None]
    ) -> None:
        self._index = index
        self._writer = writer
        self._check_open = check_open

    def present_now(self, digest: Digest) -> bool:
        self._check_open()
        return self._index.find_many([digest])[0] is not None

    def write_now(self, digest: Digest, data: bytes) -> bool:
        self._check_open()
        index = self._index
        if digest in index:
            index.touch(digest)
            return True
        if len(data) > INLINE_BYTES or self._writer.fsync:
            return False
        verifier = BlobVerifier(digest)
        verifier.check_total(len(data))
        index.check_fits(digest)
        if not index.reserve_now(digest, digest.size_bytes):
            return False
        try:
            self._writer.write_small(
                digest, verifier, [data], index.path(digest, PLAIN_VARIANT), []
            )
            index.add(digest, PLAIN_VARIANT)
        finally:
            index.unreserve(digest.size_bytes)
        return True
