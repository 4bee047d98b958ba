"""The live memory veto as the composition root wires it: the app's scheduler
starts no second action that the host's real MemAvailable (``/proc/meminfo``,
less the headroom) cannot take, and starts it once the first has ended.

Nothing here is injected: the headroom is set just under what the host has
available now, so the real reading leaves room for far less than the action
reserves."""

from __future__ import annotations

from pathlib import Path

import psutil
import trio

from lre.app import Application
from lre.proto import re_pb2
from lre.scheduler import Scheduler, Stage
from lre.snapshot import WaitReason
from tests._support.actions import build_action, put_action
from tests._support.configs import app_config_text, config_of
from tests._support.servers import serve_app

MiB = 1 << 20


async def _submit(app: Application, arguments: list[str]) -> str:
    digest = await put_action(app.stores.blob("cas"), build_action(arguments))
    request = re_pb2.ExecuteRequest(action_digest=digest.to_proto(), skip_cache_lookup=True)
    return app.schedulers["queue"].submit(request).name


async def _until_stage(scheduler: Scheduler, name: str, stage: Stage) -> None:
    with trio.fail_after(120):
        while scheduler.get_operation(name).stage is not stage:  # noqa: ASYNC110
            await trio.sleep(0.05)


async def test_the_app_holds_a_start_the_hosts_real_memavailable_cannot_take(
    tmp_path: Path,
) -> None:
    # Every action reserves 8 GiB (cold_memory; the budget has room for
    # several); the host's MemAvailable less the headroom leaves ~768 MiB.
    headroom = psutil.virtual_memory().available - 768 * MiB  # MemAvailable
    resources = (
        f'cpu_count: 2, memory_budget: "64GiB", '
        f'memory_headroom: "{headroom // MiB}MiB", memory_hard_floor: "64MiB"'
    )
    text = app_config_text(
        tmp_path, extra_scheduler=', resources: { cold_memory: "8GiB" }', resources=resources
    )
    app = Application(config_of(text))
    scheduler = app.schedulers["queue"]
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_app, app)
        first = await _submit(app, ["/bin/sleep", "300"])
        await _until_stage(scheduler, first, Stage.EXECUTING)  # alone: never vetoed
        second = await _submit(app, ["/bin/true"])
        with trio.fail_after(60):
            while [q.waiting_for for q in scheduler.statistics().queued_next] != [
                WaitReason.HOST_MEMORY
            ]:
                stage = scheduler.get_operation(second).stage
                assert stage < Stage.EXECUTING, f"started beside the first: {stage!r}"
                await trio.sleep(0.05)
        await trio.sleep(1.0)  # several sampler passes and wake-ups later
        assert scheduler.get_operation(second).stage is Stage.QUEUED
        scheduler.cancel(first)
        await _until_stage(scheduler, second, Stage.COMPLETED)
        done = scheduler.get_operation(second)
        assert done.error is None and done.result is not None and done.result.exit_code == 0
        app.request_stop()
        with trio.fail_after(60):
            await app.stopped.wait()
