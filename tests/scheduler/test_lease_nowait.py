"""``lease_nowait``: a worker takes every admissible action in one go."""

from __future__ import annotations

import pytest
import trio

from lre.errors import NotFound
from lre.scheduler import Stage
from tests._support.scheduler import execute_request, start_harness, worker_info


async def test_lease_nowait_takes_what_fits_and_never_waits(nursery: trio.Nursery) -> None:
    harness = await start_harness(nursery)
    scheduler = harness.scheduler
    scheduler.register_worker(worker_info("w1", cpus=2))  # two one-CPU actions fit
    assert scheduler.lease_nowait("w1") is None  # nothing queued: at once, no wait
    ops = [scheduler.submit(execute_request(await harness.builder.action())) for _ in range(3)]
    for op in ops:
        await harness.wait_stage(op.name, Stage.QUEUED)
    first = await scheduler.lease("w1")
    second = scheduler.lease_nowait("w1")
    assert second is not None
    assert {first.operation_name, second.operation_name} == {ops[0].name, ops[1].name}
    assert scheduler.lease_nowait("w1") is None  # the third does not fit the two CPUs
    assert scheduler.get_operation(ops[2].name).stage == Stage.QUEUED
    scheduler.unregister_worker("w1")
    with pytest.raises(NotFound):  # as lease() for a worker it does not know
        scheduler.lease_nowait("w1")
