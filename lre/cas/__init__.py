"""Storage below the gRPC services: blob stores, the action cache, helpers.

Every store follows ``BlobStore`` (``has_many``, ``read``, ``write``) and is
Trio-async; bounded stores also offer ``pin`` (``PinnableStore``) and
``statistics()``. Stores compose by wrapping.
"""

from lre.cas._blob_io import (
    missing_digests,
    read_bytes,
    read_message,
    write_bytes,
    write_message,
)
from lre.cas._filesystem import FilesystemStore
from lre.cas._memory import MemoryStore
from lre.cas._pins import Pin
from lre.cas._protocol import BlobStore, PinnableStore
from lre.cas._statistics import StoreStatistics
from lre.cas._streams import closing_stream
from lre.cas._verify import BlobVerifier, check_read_range
from lre.cas._wrappers import FastSlowStore, VerifyStore

__all__ = [
    "BlobStore",
    "BlobVerifier",
    "FastSlowStore",
    "FilesystemStore",
    "MemoryStore",
    "Pin",
    "PinnableStore",
    "StoreStatistics",
    "VerifyStore",
    "check_read_range",
    "closing_stream",
    "missing_digests",
    "read_bytes",
    "read_message",
    "write_bytes",
    "write_message",
]
