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
    #: Bytes held beyond ``max_bytes`` because the cache contract keeps them.
    overrun_bytes: int = 0
    #: The free-disk floor the store keeps (0: none, then no overrun).
    min_free_bytes: int = 0
    #: How long a blob lre told a client exists is kept (0: no contract).
    keep_told_s: float = 0.0
