"""Storage below the gRPC services: blob stores, the action cache, helpers.

Every store follows ``BlobStore`` (``has_many``, ``read``, ``write``) and is
Trio-async, and says in ``capabilities()`` what else it offers (pins,
statistics, local files, lookups from any thread). Stores compose by
wrapping.
"""

from lre.cas._action_cache import ActionCache, FilesystemActionCache, MemoryActionCache
from lre.cas._action_results import ActionResultCache
from lre.cas._blob_io import (
    BulkBlobStore,
    missing_digests,
    read_blobs,
    read_bytes,
    read_message,
    sizes_of,
    write_blobs,
    write_bytes,
    write_message,
)
from lre.cas._blob_scan import ContentUsage, content_usage
from lre.cas._content_index import ShrinkReport, disk_free_bytes
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
from lre.cas._tree import (
    TreeExtent,
    file_digests,
    tree_extent,
    tree_file_digests,
    validate_directory,
    validate_tree,
)
from lre.cas._upstream_uploads import result_blobs, upload_missing
from lre.cas._verify import BlobVerifier, check_read_range
from lre.cas._wrappers import FastSlowStore, VerifyStore

__all__ = [
    "ActionCache",
    "ActionResultCache",
    "BlobStore",
    "BlobVerifier",
    "BulkBlobStore",
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
    "check_read_range",
    "closing_stream",
    "content_usage",
    "disk_free_bytes",
    "file_digests",
    "missing_digests",
    "read_blobs",
    "read_bytes",
    "read_message",
    "result_blobs",
    "sizes_of",
    "tree_extent",
    "tree_file_digests",
    "upload_missing",
    "validate_directory",
    "validate_tree",
    "write_blobs",
    "write_bytes",
    "write_message",
]
