"""What a build says its actions need (resources:cpu, resources:memory, the
Estimated* family) is a floor under the reservation (lre/scheduler/_units.py,
_matching.py, _sizing.py)."""

from __future__ import annotations

import pytest
import trio

from lre.errors import FailedPrecondition, InvalidArgument
from lre.scheduler import ResourcePolicy
from lre.scheduler._units import estimate_of
from tests._support.scheduler import GiB, MiB, execute_request, start_harness, worker_info


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("resources:cpu", "2", (2000, 0)),
        ("resources:cpu", "0.25", (250, 0)),
        ("resources:memory", "1024", (0, 1 * GiB)),
        ("resources:memory", "0.5", (0, 512 * 1024)),
        ("EstimatedCPU", "0.5", (500, 0)),
        ("EstimatedCPU", "4000m", (4000, 0)),
        ("EstimatedMemory", "2GB", (0, 2_000_000_000)),
        ("EstimatedMemory", "4.5GB", (0, 4_500_000_000)),
        ("EstimatedMemory", "1M", (0, 1_000_000)),
        ("EstimatedMemory", "512MiB", (0, 512 * MiB)),
        ("EstimatedMemory", "1048576", (0, 1 * MiB)),
        ("EstimatedComputeUnits", "2", (2000, 5_000_000_000)),
    ],
)
def test_each_estimate_is_read_in_its_own_unit(
    key: str, value: str, expected: tuple[int, int]
) -> None:
    assert estimate_of(key, value) == expected


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("resources:cpu", "two", "not a number"),
        ("resources:memory", "-1", "must be >= 0"),
        ("EstimatedMemory", "3 parsecs", "unknown unit"),
        ("EstimatedCPU", "m", "not a number"),
    ],
)
def test_a_malformed_estimate_names_the_property(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message) as caught:
        estimate_of(key, value)
    assert key in caught.value.message


async def reservation_for(
    nursery: trio.Nursery,
    platform: dict[str, str],
    learned: tuple[int, int, int] | None = None,
    cpus: int = 8,
) -> tuple[int, int]:
    class Advisor:
        def lookup(self, key: str) -> tuple[int, int, int] | None:
            return learned

        def record(self, key: str, peak: int, average: int, step: int) -> None:
            pass

    harness = await start_harness(
        nursery, resources=ResourcePolicy(cold_memory_bytes=256 * MiB), advisor=Advisor()
    )
    worker = await harness.add_worker(worker_info(cpus=cpus, memory=16 * GiB))
    harness.scheduler.submit(execute_request(await harness.builder.action(platform=platform)))
    lease = await worker.next_lease()
    return lease.reservation.millicpus, lease.reservation.memory_bytes


async def test_bazel_resources_raise_the_reservation(nursery: trio.Nursery) -> None:
    platform = {"resources:cpu": "3", "resources:memory": "2048"}
    assert await reservation_for(nursery, platform) == (3000, 2 * GiB)


async def test_the_learner_never_lowers_what_a_build_asked_for(nursery: trio.Nursery) -> None:
    platform = {"EstimatedCPU": "2", "EstimatedMemory": "1GiB"}
    small = (500, 100 * MiB, 0)
    assert await reservation_for(nursery, platform, learned=small) == (2000, 1 * GiB)
    large = (4000, 3 * GiB, 0)
    assert await reservation_for(nursery, platform, learned=large) == (4000, 3 * GiB)


async def test_the_largest_estimate_wins_and_cpu_count_stays_a_floor(
    nursery: trio.Nursery,
) -> None:
    platform = {"cpu_count": "2", "resources:cpu": "1", "EstimatedComputeUnits": "1.5"}
    cpu, memory = await reservation_for(nursery, platform)
    assert (cpu, memory) == (2000, 3_750_000_000)


async def test_an_estimate_beyond_every_worker_is_capped_not_refused(
    nursery: trio.Nursery,
) -> None:
    platform = {"resources:cpu": "64", "EstimatedMemory": "1TB"}
    assert await reservation_for(nursery, platform, cpus=4) == (4000, 16 * GiB)


async def test_unknown_resource_keys_are_still_refused(nursery: trio.Nursery) -> None:
    harness = await start_harness(nursery)
    await harness.add_worker()
    digest = await harness.builder.action(platform={"resources:gpu": "1"})
    op = harness.scheduler.submit(execute_request(digest))
    with trio.fail_after(5):
        async with harness.scheduler.watch(op.name) as updates:
            async for snapshot in updates:
                if snapshot.done:
                    break
    assert isinstance(snapshot.error, FailedPrecondition)
    assert "resources:gpu" in snapshot.error.message
    assert "add it to supported_platform_properties" in snapshot.error.message
