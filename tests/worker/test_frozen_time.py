"""Time an action spends frozen by the memory control is not its own: it is
left out of its timeout and of the running time recorded for it (what the
learner divides its CPU by). Through a real worker, memory control and
process: the action is frozen by a real shortage reading and thawed later."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from lre.cas import MemoryStore
from lre.config import worker_resources
from lre.config._scheduler_models import SimpleSchedulerSpec
from lre.proto import re_pb2
from lre.scheduler import Completed, Outcome, Scheduler
from lre.worker import LocalWorker, PressureMonitor
from tests._support.actions import build_action, put_action
from tests._support.scratch import action_python

from .conftest import make_spec
from .test_memory_control import GiB, argv, governed, processes_of, registered, stopped, until
from .test_worker import finish

#: argv: marker, go. Waits (sleeping) until the file ``go`` exists, then
#: burns one second of its own CPU time and exits 0. It cannot end before the
#: memory control has frozen it: the test makes ``go`` only once it has seen
#: the action frozen (an action that just burned could end first on a busy
#: machine, and then there is nothing left to see frozen).
BURN = """
import os, sys, time
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
start = time.process_time()
while time.process_time() - start < 1.0:
    pass
"""

#: The action's timeout: well above its own time on a busy machine (waiting to
#: be frozen, then a second of CPU), well under that plus the time it is held
#: frozen.
TIMEOUT_S = 12.0
FROZEN_FOR_S = 16.0


class Reports:
    """The worker's scheduler, with every outcome the worker reports kept."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self.outcomes: list[Outcome] = []

    def report(self, lease_id: str, outcome: Outcome) -> bool:
        self.outcomes.append(outcome)
        return self._scheduler.report(lease_id, outcome)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scheduler, name)


async def test_frozen_time_counts_neither_in_the_timeout_nor_in_the_running_time(
    tmp_path: Path, store: MemoryStore
) -> None:
    available = [16 * GiB]
    pressure = PressureMonitor(2 * GiB, available=lambda: available[0], pressure=lambda: None)
    spec = make_spec(tmp_path, resources=governed(), sandbox_writable_paths=(str(tmp_path),))
    scheduler = Scheduler(SimpleSchedulerSpec(), cas=store)
    reports = Reports(scheduler)
    old_marker, stop_old = f"old-{tmp_path.name}", tmp_path / "stop-old"
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        worker = LocalWorker(
            spec,
            resources=worker_resources(spec),
            scheduler=reports,
            store=store,
            pressure=pressure,
        )
        await nursery.start(worker.run)
        old = await _submit(scheduler, store, argv(old_marker, 0, stop_old), None)
        await until(lambda: processes_of(old_marker) and registered(worker) == 1)
        available[0] = int(1.5 * GiB)  # short: the next action is frozen once seen
        marker, go = f"burn-{tmp_path.name}", tmp_path / "go"
        burn = await _submit(
            scheduler, store, [action_python(), "-c", BURN, marker, str(go)], TIMEOUT_S
        )
        await until(lambda: stopped(marker))
        go.touch()  # seen once thawed
        await trio.sleep(FROZEN_FOR_S)
        assert stopped(marker)  # still frozen: nothing thawed it early
        available[0] = 16 * GiB  # memory is back: thawed, it finishes its second
        done = await finish(scheduler, burn.name)
        stop_old.touch()
        await finish(scheduler, old.name)
        nursery.cancel_scope.cancel()
    assert done.error is None, done.error  # not timed out
    assert done.result is not None and done.result.exit_code == 0
    (usage,) = [
        o.usage
        for o in reports.outcomes
        if isinstance(o, Completed) and o.usage is not None and o.usage.frozen_seconds > 0
    ]
    assert usage.frozen_seconds >= FROZEN_FOR_S - 1
    assert usage.wall_seconds < usage.frozen_seconds, usage  # its own time only
    assert usage.cpu_seconds >= 0.9


async def _submit(
    scheduler: Scheduler, store: MemoryStore, arguments: list[str], timeout_s: float | None
) -> Any:
    digest = await put_action(store, build_action(arguments, timeout_s=timeout_s))
    request = re_pb2.ExecuteRequest(action_digest=digest.to_proto(), skip_cache_lookup=True)
    return scheduler.submit(request)
