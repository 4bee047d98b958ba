"""An attempt's kill: the running action's group killed and the kill recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from lre.cas import MemoryStore
from lre.worker._attempt import Attempt, MemoryKill
from lre.worker._metadata import Timeline
from lre.worker._runner_parts import RunnerContext, RunnerParts
from lre.worker.directories._action_dirs import ActionDirectory
from lre.worker.directories._workdir import WorkDirectory

from .conftest import make_lease, make_spec
from .test_containment import backend

REASON = "it passed the hard memory ceiling"


@asynccontextmanager
async def _attempt(tmp_path: Path) -> AsyncIterator[Attempt]:
    store = MemoryStore(1 << 20)
    lease = await make_lease(store, ["/bin/true"])
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        parts = RunnerParts(RunnerContext(spec, workdir, store, containment=backend("portable")))
        directory = ActionDirectory.at(tmp_path / "a")
        yield Attempt(parts, lease, directory, Timeline(queued=0.0))
        parts.close()


async def test_a_kill_before_the_action_runs_does_nothing(tmp_path: Path) -> None:
    async with _attempt(tmp_path) as attempt:
        attempt.kill(REASON, False)
    assert attempt.killed is None


async def test_a_kill_ends_the_running_group_and_is_remembered(tmp_path: Path) -> None:
    async with _attempt(tmp_path) as attempt:
        sleeper = await trio.lowlevel.open_process(["sleep", "300"], start_new_session=True)
        try:
            attempt.group = sleeper.pid
            attempt.kill(REASON, True)
            with trio.fail_after(10):
                assert await sleeper.wait() == -9
        finally:
            sleeper.kill()
    assert attempt.killed == MemoryKill(None, REASON, True)
