"""Storage below the gRPC services: blob stores, the action cache, helpers.

Every store follows ``BlobStore`` (``has_many``, ``read``, ``write``) and is
Trio-async, and says in ``capabilities()`` what else it offers (pins,
statistics, local files, lookups from any thread). Stores compose by
wrapping.
"""

from lre.cas._action_cache import ActionCache, FilesystemActionCache, MemoryActionCache
from lre.cas._action_results import ActionResultCache
from lre.cas._blob_io import (
    read_blobs,
    read_bytes,
    read_message,
    sizes_of,
    write_blobs,
    write_message,
)
from lre.cas._blob_scan import ContentUsage, content_usage
from lre.cas._content_index import ShrinkReport
from lre.cas._directory_cache import DirectoryCache
from lre.cas._directory_reader import DirectoryReader
from lre.cas._filesystem import FilesystemStore
from lre.cas._grpc_action_cache import FastSlowActionCache, GrpcActionCache
from lre.cas._grpc_store import GrpcStore
from lre.cas._inline import call_inline
from lre.cas._memory import MemoryStore
from lre.cas._pins import Pin
from lre.cas._protocol import BlobStore, ImmediateReads, StoreCapabilities
from lre.cas._statistics import StoreStatistics
from lre.cas._streams import closing_stream
from lre.cas._tree import TreeExtent, tree_extent
from lre.cas._upstream_uploads import upload_missing
from lre.cas._wrappers import FastSlowStore, VerifyStore

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
    "sizes_of",
    "tree_extent",
    "upload_missing",
    "write_blobs",
    "write_message",
]
