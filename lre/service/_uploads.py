"""Resumable ByteStream uploads: partial state per upload id (Trio side).

An upload that breaks off (client gone, stream cut) keeps what arrived,
keyed by instance, upload id and resource, so that QueryWriteStatus reports
``committed_size`` and a new Write with that ``write_offset`` continues it.
Partial state is dropped after ``ttl_seconds`` without activity, when the
partial bytes of all uploads exceed ``max_bytes`` (oldest first), when the
upload fails with an error (bad offset, wrong data), and once it completes.
Partial data is held in memory.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from lre.errors import Aborted
from lre.service._resource_names import BlobResource


@dataclass(frozen=True, slots=True)
class UploadKey:
    instance_name: str
    upload_id: str
    digest_hash: str
    size_bytes: int
    compressed: bool

    @classmethod
    def of(cls, resource: BlobResource) -> UploadKey:
        assert resource.upload_id is not None
        return cls(
            resource.instance_name,
            resource.upload_id,
            resource.digest.hash,
            resource.digest.size_bytes,
            resource.compressed,
        )


@dataclass(slots=True, eq=False)
class PartialUpload:
    """The bytes received so far for one upload (compressed bytes if compressed)."""

    chunks: list[bytes] = field(default_factory=list)
    committed: int = 0
    busy: bool = False
    touched: float = 0.0

    def append(self, data: bytes) -> None:
        self.chunks.append(data)
        self.committed += len(data)

    def reset(self) -> None:
        self.chunks.clear()
        self.committed = 0


class UploadRegistry:
    """Partial uploads by ``UploadKey``; used only on the Trio thread."""

    def __init__(self, *, ttl_seconds: float = 600.0, max_bytes: int = 1 << 30) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_bytes = max_bytes
        self._uploads: OrderedDict[UploadKey, PartialUpload] = OrderedDict()

    def __len__(self) -> int:
        return len(self._uploads)

    @property
    def partial_bytes(self) -> int:
        return sum(u.committed for u in self._uploads.values())

    def committed(self, key: UploadKey) -> int:
        """Bytes received so far for ``key`` (0 when unknown)."""
        self._sweep()
        upload = self._uploads.get(key)
        return upload.committed if upload is not None else 0

    def holds(self, key: UploadKey) -> bool:
        """Whether ``key`` has partial data or a stream writing it now."""
        self._sweep()
        return key in self._uploads

    def acquire(self, key: UploadKey) -> PartialUpload:
        """The upload for ``key``, created if new, marked busy.

        Raises ``Aborted`` naming the upload id when another stream is
        writing it right now. Pair with ``release``.
        """
        self._sweep()
        upload = self._uploads.get(key)
        if upload is None:
            upload = PartialUpload()
            self._uploads[key] = upload
        elif upload.busy:
            raise Aborted(
                f"upload {key.upload_id!r} is being written by another stream; retry after it ends"
            )
        upload.busy = True
        upload.touched = time.monotonic()
        self._uploads.move_to_end(key)
        return upload

    def release(self, key: UploadKey, upload: PartialUpload) -> None:
        """End the stream's use of ``upload``; an empty one is dropped."""
        upload.busy = False
        upload.touched = time.monotonic()
        if upload.committed == 0 and self._uploads.get(key) is upload:
            del self._uploads[key]

    def discard(self, key: UploadKey) -> None:
        """Forget ``key`` (completed or failed)."""
        upload = self._uploads.pop(key, None)
        if upload is not None:
            upload.reset()

    def _sweep(self) -> None:
        now = time.monotonic()
        total = 0
        for key, upload in list(self._uploads.items()):
            if not upload.busy and now - upload.touched > self.ttl_seconds:
                del self._uploads[key]
            else:
                total += upload.committed
        if total <= self.max_bytes:
            return
        for key, upload in list(self._uploads.items()):  # oldest first
            if total <= self.max_bytes:
                break
            if not upload.busy:
                total -= upload.committed
                del self._uploads[key]
