"""What a wrapper passes through of the stores it wraps (``capabilities()``).

Each capability of ``StoreCapabilities`` is checked through each wrapper:
either the wrapper hands on the wrapped store's answer, or it withholds it
for a reason written here. A new capability field, or a new wrapper, that is
in neither list fails ``test_every_capability_is_passed_through_or_withheld``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from lre.cas import (
    ActionResultCache,
    BlobStore,
    FastSlowActionCache,
    FastSlowStore,
    FilesystemStore,
    MemoryActionCache,
    MemoryStore,
    StoreCapabilities,
    StoreStatistics,
    VerifyStore,
    read_bytes,
)
from lre.cas._blob_io import write_bytes
from lre.digest import digest_of
from lre.errors import ResourceExhausted
from tests._support.stores import FakeStore

from .conftest import pin


def full_store(files: FilesystemStore) -> FakeStore:
    """A store offering every capability, each answer a distinct object."""
    return FakeStore(
        MemoryStore(1 << 20),
        offer=("pin", "statistics"),
        local_files=files,
        immediate_reads=files,
        immediate_writes=files.capabilities().immediate_writes,
    )


Wrap = Callable[[BlobStore], BlobStore]

WRAPPERS: dict[str, Wrap] = {
    "verify": VerifyStore,
    "fast_slow (as fast)": lambda store: FastSlowStore(store, MemoryStore(1 << 20)),
}

#: Capabilities a wrapper does not hand on, and why.
WITHHELD: dict[str, dict[str, str]] = {
    "verify": {
        "statistics": "the wrapped store is a configured store reporting under its own name",
        "immediate_writes": "a write would reach the wrapped store without the wrapper's checks",
    },
    "fast_slow (as fast)": {
        "statistics": "each tier is a configured store reporting under its own name",
        "immediate_reads": "a read may copy the blob from slow into fast (a change of state)",
        "immediate_writes": "a write must also reach the slow tier (write_policy both)",
    },
}


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_every_capability_is_passed_through_or_withheld(wrapper: str, tmp_path: Path) -> None:
    inner = full_store(FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 20))
    offered = inner.capabilities()
    outer = WRAPPERS[wrapper](inner).capabilities()
    for field in dataclasses.fields(StoreCapabilities):
        mine = getattr(outer, field.name)
        if field.name in WITHHELD[wrapper]:
            assert mine is None, f"{wrapper} offers {field.name} it says it withholds"
        else:
            assert mine is not None, f"{wrapper} loses {field.name} of the store it wraps"
            assert mine == getattr(offered, field.name), f"{wrapper} changes {field.name}"


def test_fast_slow_offers_nothing_of_its_slow_tier(tmp_path: Path) -> None:
    slow = full_store(FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 20))
    assert FastSlowStore(MemoryStore(1 << 20), slow).capabilities().local_files is None
    wrapped_pinless = FastSlowStore(VerifyStore(FakeStore()), MemoryStore(1 << 20))
    assert wrapped_pinless.capabilities().pin is None


@pytest.mark.parametrize("outer", ["verify", "fast_slow", "verify over fast_slow"])
async def test_a_pin_through_a_wrapper_keeps_the_blob_from_eviction(outer: str) -> None:
    bounded = MemoryStore(100)
    store: BlobStore
    if outer == "verify":
        store = VerifyStore(bounded)
    elif outer == "fast_slow":
        store = FastSlowStore(bounded, MemoryStore(1 << 20), write_policy="fast_only")
    else:
        store = VerifyStore(FastSlowStore(bounded, MemoryStore(1 << 20), write_policy="fast_only"))
    kept = await write_bytes(store, b"a" * 60)
    with pin(store, [kept]), pytest.raises(ResourceExhausted):
        await write_bytes(bounded, b"b" * 60)
    assert await read_bytes(bounded, kept) == b"a" * 60


async def test_local_files_and_immediate_reads_reach_through_verify(tmp_path: Path) -> None:
    files = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 20)
    await files.open()
    try:
        digest = await write_bytes(files, b"hello")
        nested = VerifyStore(VerifyStore(files))
        assert nested.capabilities().local_files is files
        reads = nested.capabilities().immediate_reads
        assert reads is not None
        assert reads.read_now(digest, 0, 0) == b"hello"
        assert FastSlowStore(nested, MemoryStore(1 << 20)).capabilities().local_files is files
    finally:
        await files.close()


def test_leaf_stores_report_their_own_statistics(tmp_path: Path) -> None:
    memory = MemoryStore(1000)
    files = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 2000)
    for store, max_bytes in ((memory, 1000), (files, 2000)):
        statistics = store.capabilities().statistics
        assert statistics is not None
        answer = statistics()
        assert isinstance(answer, StoreStatistics) and answer.max_bytes == max_bytes


async def test_known_absent_is_the_caches_own_answer() -> None:
    memory = MemoryActionCache()
    action = digest_of(b"action")
    assert ActionResultCache(memory, MemoryStore(1 << 20)).known_absent(action)
    await memory.put(action, b"entry")
    assert not ActionResultCache(memory, MemoryStore(1 << 20)).known_absent(action)
    # A fast/slow cache is always asked, so that its slow-tier misses are counted
    # (the miss report), even over two tiers that know they hold nothing.
    cache = FastSlowActionCache(MemoryActionCache(), MemoryActionCache())
    results = ActionResultCache(cache, MemoryStore(1 << 20))
    assert not results.known_absent(action)
    assert await results.get_result(action) is None
    assert cache.slow_misses_in_a_row == 1
