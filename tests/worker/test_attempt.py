"""An attempt's kill: the running action's group killed and the kill recorded."""

from __future__ import annotations

from pathlib import Path

import trio

from lre.cas import MemoryStore
from lre.worker._attempt import Attempt, MemoryKill
from lre.worker._metadata import Timeline
from lre.worker.directories._action_dirs import ActionDirectory

from .conftest import make_lease
from .test_containment import backend

REASON = "it passed the hard memory ceiling"


async def _attempt(tmp_path: Path) -> Attempt:
    lease = await make_lease(MemoryStore(1 << 20), ["/bin/true"])
    return Attempt(lease, ActionDirectory.at(tmp_path / "a"), Timeline(queued=0.0))


async def test_a_kill_before_the_action_runs_does_nothing(tmp_path: Path) -> None:
    attempt = await _attempt(tmp_path)
    attempt.kill(REASON, False, backend("portable"), None)
    assert attempt.killed is None


async def test_a_kill_ends_the_running_group_and_is_remembered(tmp_path: Path) -> None:
    attempt = await _attempt(tmp_path)
    sleeper = await trio.lowlevel.open_process(["sleep", "300"], start_new_session=True)
    try:
        attempt.group = sleeper.pid
        attempt.kill(REASON, True, backend("portable"), None)
        with trio.fail_after(10):
            assert await sleeper.wait() == -9
    finally:
        sleeper.kill()
    assert attempt.killed == MemoryKill(None, REASON, True)
