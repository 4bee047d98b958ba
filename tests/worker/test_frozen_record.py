"""A real action frozen by the memory control: its history record counts the
freeze, and an action queued meanwhile says it waits for ``frozen``."""

from __future__ import annotations

from pathlib import Path

import trio

from lre.cas import MemoryStore
from lre.config import worker_resources
from lre.config._scheduler_models import SimpleSchedulerSpec
from lre.scheduler import ResourcePolicy, Scheduler
from lre.snapshot import ActionRecord, WaitReason
from lre.worker import LocalWorker, PressureMonitor
from tests._support.scratch import action_python

from .conftest import make_spec
from .test_memory_control import GiB, MiB, governed, start_old_and_new, stopped, until
from .test_worker import finish, submit


async def test_a_frozen_run_is_recorded_and_what_waits_meanwhile_says_frozen(
    tmp_path: Path, store: MemoryStore
) -> None:
    available = [16 * GiB]
    pressure = PressureMonitor(2 * GiB, available=lambda: available[0], pressure=lambda: None)
    records: list[ActionRecord] = []
    spec = make_spec(tmp_path, resources=governed(), sandbox_writable_paths=(str(tmp_path),))
    scheduler = Scheduler(
        SimpleSchedulerSpec(),
        cas=store,
        resources=ResourcePolicy(cold_memory_bytes=256 * MiB),  # the veto weighs a reservation
        on_record=lambda build: records.append(build()),
        available_memory=pressure.room_bytes,  # as the composition root wires it
        memory_frozen=lambda: pressure.frozen > 0,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        worker = LocalWorker(
            spec,
            resources=worker_resources(spec),
            scheduler=scheduler,
            store=store,
            pressure=pressure,
        )
        await nursery.start(worker.run)
        started = await start_old_and_new(scheduler, worker, store, tmp_path, 400)
        available[0] = int(1.5 * GiB)  # short: the newest is frozen
        await until(lambda: stopped(started.new_marker))
        third = await submit(scheduler, store, [action_python(), "-c", "pass"])
        await until(
            lambda: (
                [q.waiting_for for q in scheduler.statistics().queued_next] == [WaitReason.FROZEN]
            )
        )
        available[0] = 16 * GiB  # memory is back: thawed, and the third starts
        await until(lambda: stopped(started.new_marker) is False)
        started.stop_old.touch()
        started.stop_new.touch()
        for op in (started.old, started.new, third):
            await finish(scheduler, op.name)
        nursery.cancel_scope.cancel()
    by_name = {r.action: r for r in records}
    old = by_name[started.old.action_key.action_digest.hash]
    new = by_name[started.new.action_key.action_digest.hash]
    waited = by_name[third.action_key.action_digest.hash]
    assert (old.freezes, new.freezes) == (0, 1)
    assert WaitReason.FROZEN in waited.waited_for
