"""A memory kill that would only repeat ends with the killed run's result
(lre/worker/memory/_doomed.py), through a real worker, scheduler and sampler."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trio

from lre.cas import ActionResultCache, MemoryActionCache, MemoryStore, read_bytes
from lre.config import ByteSize, worker_resources
from lre.config._scheduler_models import SchedulerResourceSpec, SimpleSchedulerSpec
from lre.config._worker_models import ResourceSpec
from lre.digest import Digest
from lre.scheduler import MemoryExceeded, Reservation, Scheduler
from lre.worker import LocalWorker, PressureMonitor, WorkerHost
from lre.worker.containment._containment import choose_containment
from lre.worker.memory._doomed import MemoryCeiling, doomed_explanation
from tests._support.scratch import action_python

from .conftest import make_lease, make_spec
from .test_worker import finish, submit

MiB = 1 << 20

#: argv: runs file. Says hello on stderr, counts its run, then grows to 400
#: MiB (4 MiB every 20 ms) and waits.
HOG = """
import sys, time
print("hog: starting", file=sys.stderr, flush=True)
with open(sys.argv[1], "a") as runs:
    runs.write("run\\n")
chunks = []
while len(chunks) < 100:
    b = bytearray(4 << 20); b[::4096] = b"x" * len(b[::4096]); chunks.append(b)
    time.sleep(0.02)
time.sleep(60)
"""


@pytest.mark.parametrize("containment", ["pidns", "userns", "portable"])
async def test_an_action_over_the_hard_ceiling_runs_once_and_gets_a_result_saying_why(
    tmp_path: Path, store: MemoryStore, containment: str
) -> None:
    """Budget 64 MiB, kill_factor 1.5: the ceiling is 96 MiB. The hog is
    killed there once; the client gets a completed result (exit code 137,
    status OK), not RESOURCE_EXHAUSTED, with the hog's own stderr and then
    lre's explanation: the peak, the ceiling and how it was worked out, and
    the setting that raises it. The result is not in the action cache."""
    resources = ResourceSpec(
        cpu_count=2,
        memory_budget=ByteSize(64 * MiB),
        sample_interval=0.05,  # type: ignore[arg-type]
    )
    spec = make_spec(tmp_path, resources=resources, sandbox_writable_paths=(str(tmp_path),))
    cache = ActionResultCache(MemoryActionCache(), store)
    runs = tmp_path / "runs"
    scheduler = Scheduler(SimpleSchedulerSpec(), cas=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        worker = LocalWorker(
            spec,
            resources=worker_resources(spec, scheduler=SchedulerResourceSpec(kill_factor=1.5)),
            scheduler=scheduler,
            store=store,
            pressure=PressureMonitor(int(resources.memory_headroom)),
            action_cache=cache,
            host=WorkerHost(choose_containment(containment)),
        )
        await nursery.start(worker.run)
        op = await submit(scheduler, store, [action_python(), "-c", HOG, str(runs)])
        done = await finish(scheduler, op.name)
        nursery.cancel_scope.cancel()
    assert runs.read_text() == "run\n"  # it ran, once
    assert done.error is None, done.error
    result = done.result
    assert result is not None and result.exit_code == 137
    stderr = await read_bytes(store, Digest.from_proto(result.stderr_digest))
    text = stderr.decode()
    assert text.startswith("hog: starting\n"), text
    assert "lre: killed this action (exit code 137, SIGKILL): its memory reached" in text
    assert "over the hard ceiling of 96 MiB = the memory budget 64 MiB" in text
    assert "x kill_factor 1.5" in text
    assert "lre up --memory-budget SIZE" in text
    assert "workers[].local.resources.memory_budget" in text
    assert result.execution_metadata.execution_start_timestamp.seconds > 0
    assert result.execution_metadata.execution_completed_timestamp.seconds > 0
    assert await cache.get_result(op.action_key.action_digest) is None
    assert scheduler.statistics().ladder_kills == 1


async def test_the_last_kill_the_ladder_allows_is_explained_with_the_shortage_and_the_count(
    store: MemoryStore,
) -> None:
    lease = dataclasses.replace(
        await make_lease(store, ["/bin/true"]),
        reservation=Reservation(1000, 1 << 30),
        memory_kills=4,
        last_chance=True,
    )
    killed = MemoryExceeded(1536 * MiB, reason="host MemAvailable 900 MiB is under the floor")
    ceiling = MemoryCeiling(2 << 30, False, 1.2)
    text = doomed_explanation(lease, killed, ceiling)
    assert text.startswith("\nlre: killed this action (exit code 137, SIGKILL): memory was short")
    assert "(host MemAvailable 900 MiB is under the floor)" in text
    assert "this was kill 5, the last that schedulers[].simple.resources.max_steps allows" in text
    assert "it reached 1.5 GiB (peak RSS of its processes) reserving 1 GiB" in text
    assert "The hard ceiling is 2.4 GiB = the last ladder step 2 GiB" in text
    assert "(schedulers[].simple.resources.ladder; no memory budget) x kill_factor 1.2" in text
    assert "lre up --memory-budget SIZE" in text and text.endswith("use less.\n")
