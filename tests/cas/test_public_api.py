"""The public surface of lre.cas: other packages rely on exactly these names."""

from __future__ import annotations

import lre.cas


def test_public_names() -> None:
    # The storage layer's names; the upstream (grpc) stores add their own.
    assert set(lre.cas.__all__) >= set(
        [
            "ActionCache",
            "ActionResultCache",
            "BlobStore",
            "BlobVerifier",
            "BulkBlobStore",
            "FastSlowStore",
            "FilesystemActionCache",
            "FilesystemStore",
            "MemoryActionCache",
            "MemoryStore",
            "Pin",
            "PinnableStore",
            "StoreStatistics",
            "VerifyStore",
            "check_read_range",
            "closing_stream",
            "file_digests",
            "missing_digests",
            "read_blobs",
            "read_bytes",
            "read_directory_tree",
            "read_message",
            "sizes_of",
            "tree_file_digests",
            "validate_directory",
            "validate_tree",
            "write_blobs",
            "write_bytes",
            "write_message",
        ]
    )
    assert sorted(lre.cas.__all__) == lre.cas.__all__
    for name in lre.cas.__all__:
        assert getattr(lre.cas, name).__module__.startswith("lre.cas")


def test_stores_satisfy_the_protocols() -> None:
    memory = lre.cas.MemoryStore(1)
    assert isinstance(memory, lre.cas.PinnableStore)
    fs = lre.cas.FilesystemStore("/nonexistent/c", "/nonexistent/t", 1)
    assert isinstance(fs, lre.cas.PinnableStore)
    assert isinstance(lre.cas.VerifyStore(memory), lre.cas.PinnableStore)
    assert isinstance(lre.cas.FastSlowStore(memory, fs), lre.cas.PinnableStore)
    assert isinstance(memory, lre.cas.BulkBlobStore)
    assert isinstance(fs, lre.cas.BulkBlobStore)
    assert isinstance(lre.cas.MemoryActionCache(), lre.cas.ActionCache)
    assert isinstance(lre.cas.FilesystemActionCache("/nonexistent/ac"), lre.cas.ActionCache)
