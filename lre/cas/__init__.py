"""Storage below the gRPC services: blob stores, the action cache, helpers.

Every store follows ``BlobStore`` (``has_many``, ``read``, ``write``) and is
Trio-async, and says in ``capabilities()`` what else it offers (pins,
statistics, local files, lookups from any thread). Stores compose by
wrapping.
"""

from lre.cas._blob_io import (
    read_blobs,
    read_bytes,
    read_message,
    write_blobs,
    write_message,
)
from lre.cas._memory import MemoryStore
from lre.cas._pins import Pin
from lre.cas._protocol import BlobStore, ImmediateReads, LocalFiles, StoreCapabilities
from lre.cas._statistics import StoreStatistics
from lre.cas._streams import closing_stream
from lre.cas._wrappers import FastSlowStore, VerifyStore
from lre.cas.action_cache._caches import ActionCache, FilesystemActionCache, MemoryActionCache
from lre.cas.action_cache._results import ActionResultCache
from lre.cas.filesystem._blob_scan import ContentUsage, content_usage
from lre.cas.filesystem._content_index import ShrinkReport
from lre.cas.filesystem._inline import call_inline
from lre.cas.filesystem._store import FilesystemStore
from lre.cas.remote._action_cache import FastSlowActionCache, GrpcActionCache
from lre.cas.remote._store import GrpcStore
from lre.cas.remote._uploads import upload_missing
from lre.cas.trees._directory_cache import DirectoryCache
from lre.cas.trees._directory_reader import DirectoryReader
from lre.cas.trees._tree import TreeExtent, tree_extent

__all__ = [
    "ActionCache",
    "ActionResultCache",
    "BlobStore",
    "ContentUsage",
    "DirectoryCache",
    "DirectoryReader",
    "FastSlowActionCache",
    "FastSlowStore",
    "FilesystemActionCache",
    "FilesystemStore",
    "GrpcActionCache",
    "GrpcStore",
    "ImmediateReads",
    "LocalFiles",
    "MemoryActionCache",
    "MemoryStore",
    "Pin",
    "ShrinkReport",
    "StoreCapabilities",
    "StoreStatistics",
    "TreeExtent",
    "VerifyStore",
    "call_inline",
    "closing_stream",
    "content_usage",
    "read_blobs",
    "read_bytes",
    "read_message",
    "tree_extent",
    "upload_missing",
    "write_blobs",
    "write_message",
]
