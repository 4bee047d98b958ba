"""Frozen snapshots of a store's state, for the TUI and /metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """What a bounded store holds right now and what it has evicted so far."""

    blob_count: int
    stored_bytes: int
    max_bytes: int
    pinned_blobs: int
    evicted_blobs: int
    evicted_bytes: int
