"""The cache contract of ``FilesystemStore`` (``ContentIndex``): a blob lre told
a client exists stays for ``keep_told_s``; past ``max_bytes`` the store
overruns down to a free-disk floor, and past the floor a write fails naming
it; ``evict_to`` keeps told blobs unless forced; restarts keep the uses."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from lre.cas import FilesystemStore
from lre.cas._blob_io import write_bytes
from lre.digest import digest_of
from lre.errors import ResourceExhausted

HOUR = 3600.0


class Clock:
    """Wall-clock seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Disk:
    """Free bytes of a pretend disk: ``free`` minus what the store holds."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.store: FilesystemStore | None = None

    def __call__(self) -> int:
        held = self.store.statistics().stored_bytes if self.store is not None else 0
        return self.free - held


async def contract_store(
    root: Path,
    *,
    max_bytes: int = 3000,
    floor: int = 1000,
    free: int = 10_000,
    clock: Clock | None = None,
    overruns: list[str] | None = None,
) -> tuple[FilesystemStore, Clock, Disk]:
    clock = clock or Clock()
    disk = Disk(free)
    store = FilesystemStore(
        root / "cas",
        root / "tmp",
        max_bytes,
        keep_told_s=3 * HOUR,
        min_free_bytes=floor,
        clock=clock,
        free_disk=disk,
        on_overrun=(overruns.append if overruns is not None else None),
    )
    disk.store = store
    await store.open()
    return store, clock, disk


def blob(n: int, size: int = 1000) -> bytes:
    return bytes([n]) * size


async def test_told_blobs_are_kept_past_max_bytes_and_the_overrun_is_said_once(
    tmp_path: Path,
) -> None:
    overruns: list[str] = []
    store, clock, _ = await contract_store(tmp_path, overruns=overruns)
    told = [await write_bytes(store, blob(i)) for i in range(3)]
    clock.now += HOUR  # within the 3 h the clients may rely on them
    more = [await write_bytes(store, blob(i)) for i in range(3, 5)]
    present = await store.has_many([*told, *more])
    assert all(p is not None for p in present), present  # nothing evicted
    stats = store.statistics()
    assert stats.overrun_bytes == 2000
    assert len(overruns) == 1, overruns
    assert "max_bytes of 3000" in overruns[0]
    assert "cache contract" in overruns[0]


async def test_past_the_floor_a_write_fails_naming_it(tmp_path: Path) -> None:
    store, _, _ = await contract_store(tmp_path, max_bytes=3000, floor=1000, free=5500)
    for i in range(4):
        await write_bytes(store, blob(i))  # 4000 held, 1500 free
    with pytest.raises(ResourceExhausted) as caught:
        await write_bytes(store, blob(9))  # would leave 500 < 1000
    assert "free-disk floor of 1000 bytes" in str(caught.value)
    assert "min_free_disk" in str(caught.value)
    assert store.statistics().blob_count == 4


async def test_blobs_whose_time_ran_out_are_evicted_first(tmp_path: Path) -> None:
    store, clock, _ = await contract_store(tmp_path)
    old = [await write_bytes(store, blob(i)) for i in range(2)]
    clock.now += 2 * HOUR
    fresh = await write_bytes(store, blob(2))
    clock.now += 1.5 * HOUR  # the first two were last used 3.5 h ago
    newest = await write_bytes(store, blob(3))
    assert await store.has_many(old) == [None, 1000]  # only the excess went
    assert await store.has_many([fresh, newest]) == [1000, 1000]
    assert store.statistics().overrun_bytes == 0


async def test_a_lookup_renews_the_contract(tmp_path: Path) -> None:
    store, clock, _ = await contract_store(tmp_path)
    first = await write_bytes(store, blob(0))
    second = await write_bytes(store, blob(1))
    third = await write_bytes(store, blob(2))
    clock.now += 2.5 * HOUR
    # FindMissingBlobs answered on the gRPC thread tells the client it exists.
    assert await trio.to_thread.run_sync(store.sizes_now, [first.hash], [1000]) == [1000]
    clock.now += 1 * HOUR  # second and third: 3.5 h; first: 1 h since told
    await write_bytes(store, blob(3))
    assert await store.has_many([first, second, third]) == [1000, None, 1000]


async def test_without_a_floor_a_full_store_refuses_instead_of_overrunning(
    tmp_path: Path,
) -> None:
    store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 2000, keep_told_s=3 * HOUR)
    await store.open()
    kept = [await write_bytes(store, blob(i)) for i in range(2)]
    with pytest.raises(ResourceExhausted) as caught:
        await write_bytes(store, blob(5))
    assert "min_free_disk" in str(caught.value)
    assert await store.has_many(kept) == [1000, 1000]


async def test_gc_keeps_told_blobs_unless_forced(tmp_path: Path) -> None:
    store, clock, _ = await contract_store(tmp_path, max_bytes=10_000)
    old = await write_bytes(store, blob(0))
    clock.now += 4 * HOUR
    told = [await write_bytes(store, blob(i)) for i in range(1, 3)]
    report = await store.evict_to(0)
    assert report.evicted_blobs == 1
    assert report.kept_told_bytes == 2000
    assert await store.has_many([old]) == [None]
    assert await store.has_many(told) == [1000, 1000]
    assert store.told_bytes() == 2000
    forced = await store.evict_to(0, force=True)
    assert forced.evicted_blobs == 2
    assert await store.has_many(told) == [None, None]


async def test_a_restart_keeps_the_contract_from_the_files_mtimes(tmp_path: Path) -> None:
    store, clock, _ = await contract_store(tmp_path, max_bytes=2000)
    old = await write_bytes(store, blob(0))
    told = await write_bytes(store, blob(1))
    await store.close()
    path = tmp_path / "cas" / old.hash[:2] / f"{old.hash}-{old.size_bytes}"
    os.utime(path, (clock.now - 4 * HOUR, clock.now - 4 * HOUR))
    again, _, _ = await contract_store(tmp_path, max_bytes=2000, clock=clock)
    await write_bytes(again, blob(2))
    assert await again.has_many([old, told]) == [None, 1000]
    assert again.statistics().overrun_bytes == 0


async def test_pinned_blobs_overrun_too_and_never_leave(tmp_path: Path) -> None:
    store, clock, _ = await contract_store(tmp_path, max_bytes=2000)
    pinned = [await write_bytes(store, blob(i)) for i in range(2)]
    clock.now += 4 * HOUR  # the contract ran out, the pins did not
    with store.pin(pinned):
        extra = await write_bytes(store, blob(7))
        assert await store.has_many([*pinned, extra]) == [1000, 1000, 1000]
        assert store.statistics().overrun_bytes == 1000
    assert digest_of(blob(7)) == extra


class CountingDisk(Disk):
    """``Disk`` that counts its readings; ``others`` are bytes another
    program wrote to the same disk."""

    def __init__(self, free: int) -> None:
        super().__init__(free)
        self.readings = 0
        self.others = 0

    def __call__(self) -> int:
        self.readings += 1
        return super().__call__() - self.others


async def test_the_free_disk_is_read_again_near_the_floor_or_once_the_reading_is_old(
    tmp_path: Path,
) -> None:
    def opened(max_age: float) -> tuple[FilesystemStore, CountingDisk]:
        disk = CountingDisk(100_000)
        store = FilesystemStore(
            tmp_path / f"cas{max_age}",
            tmp_path / f"tmp{max_age}",
            1 << 20,
            keep_told_s=3 * HOUR,
            min_free_bytes=10_000,
            free_disk=disk,
            free_disk_max_age_s=max_age,
        )
        disk.store = store
        return store, disk

    # Far above the floor one reading serves many writes (lre's own writes
    # are counted against it)...
    store, disk = opened(3600.0)
    await store.open()
    for i in range(40):
        await write_bytes(store, blob(i))
    assert disk.readings <= 2, disk.readings
    # ...and within twice the floor of it every write reads the disk again,
    # so another program's bytes are seen and the floor still holds.
    for i in range(40, 81):
        await write_bytes(store, blob(i))  # 81,000 held: 19,000 free
    near = disk.readings
    for i in range(81, 86):
        await write_bytes(store, blob(i))  # 86,000 held: 14,000 free
    assert disk.readings == near + 5
    disk.others = 3_500  # 10,500 free
    with pytest.raises(ResourceExhausted) as caught:
        await write_bytes(store, blob(99))  # would leave 9,500
    assert "free-disk floor of 10000 bytes" in str(caught.value)
    # An old reading is never used: with no age allowed, every write reads.
    fresh, fresh_disk = opened(0.0)
    await fresh.open()
    for i in range(5):
        await write_bytes(fresh, blob(i))
    assert fresh_disk.readings == 5
