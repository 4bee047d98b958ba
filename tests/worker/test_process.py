"""Process groups: nothing an action starts outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import trio

from lre.errors import InvalidArgument
from lre.worker import run_process


def group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


async def group_drains(pgid: int) -> list[psutil.Process]:
    """Members left in the group once SIGKILL has had time to land.

    ``killpg`` only queues the signal; each member exits when the kernel next
    schedules it, so a member can look alive for a moment after the call.
    """
    with trio.move_on_after(5):
        while group_members(pgid):  # noqa: ASYNC110 (polling other processes; no event exists)
            await trio.sleep(0.02)
    return group_members(pgid)


async def no_survivors(pids: list[int]) -> None:
    """Orphans are reaped by init asynchronously; allow it a moment."""

    def alive() -> list[int]:
        found = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    found.append(pid)
            except psutil.NoSuchProcess:
                continue
        return found

    with trio.move_on_after(5):
        while alive():  # noqa: ASYNC110 (polling another process; no event exists)
            await trio.sleep(0.02)
    assert alive() == []


async def start(tmp_path: Path, script: str, **kwargs: object) -> tuple[object, list[int]]:
    leaders: list[int] = []
    outcome = await run_process(
        ["/bin/sh", "-c", script],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        stdout_path=tmp_path / "out",
        stderr_path=tmp_path / "err",
        on_started=leaders.append,
        **{"timeout": 30.0, "kill_grace": 0.5, **kwargs},  # type: ignore[arg-type]
    )
    return outcome, leaders


async def test_background_child_dies_with_the_action(tmp_path: Path) -> None:
    outcome, (leader,) = await start(tmp_path, "sleep 300 & echo $! > bgpid; exit 0")
    background = int((tmp_path / "bgpid").read_text())
    assert outcome.exit_code == 0  # type: ignore[attr-defined]
    await no_survivors([background])
    assert await group_drains(leader) == []


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    script = "trap '' TERM; (sleep 300 & echo $! > bgpid; wait) & echo partial; sleep 300"
    with trio.fail_after(10):
        outcome, (leader,) = await start(tmp_path, script, timeout=2.0, kill_grace=0.3)
    assert outcome.timed_out  # type: ignore[attr-defined]
    assert outcome.signal == signal.SIGKILL  # type: ignore[attr-defined]
    assert (tmp_path / "out").read_bytes() == b"partial\n"
    await no_survivors([int((tmp_path / "bgpid").read_text())])
    assert await group_drains(leader) == []


async def test_sigterm_first_then_grace(tmp_path: Path) -> None:
    script = "trap 'echo got-term; exit 7' TERM; sleep 300 & wait"
    outcome, _ = await start(tmp_path, script, timeout=0.3, kill_grace=5)
    assert outcome.timed_out and outcome.exit_code == 7  # type: ignore[attr-defined]
    assert b"got-term" in (tmp_path / "out").read_bytes()


async def test_cancel_mid_run_kills_and_reaps(tmp_path: Path) -> None:
    leaders: list[int] = []
    with trio.move_on_after(0.5) as scope:
        await run_process(
            ["/bin/sh", "-c", "sleep 300 & echo $! > bgpid; sleep 300"],
            cwd=tmp_path,
            env={},
            stdout_path=tmp_path / "out",
            stderr_path=tmp_path / "err",
            timeout=30,
            kill_grace=0.5,
            on_started=leaders.append,
        )
    assert scope.cancelled_caught
    (leader,) = leaders
    with pytest.raises(ChildProcessError):
        os.waitpid(leader, os.WNOHANG)  # noqa: ASYNC222 (already reaped: no zombie left)
    await no_survivors([leader, int((tmp_path / "bgpid").read_text())])


async def test_leader_dies_when_lre_is_killed(tmp_path: Path) -> None:
    code = f"""
import sys, trio
from pathlib import Path
from lre.errors import InvalidArgument
from lre.worker import run_process
async def main():
    def started(pid):
        print(pid, flush=True)
    await run_process(["sleep", "300"], cwd=Path({str(tmp_path)!r}), env={{}},
        stdout_path=Path({str(tmp_path / "o")!r}), stderr_path=Path({str(tmp_path / "e")!r}),
        timeout=300, kill_grace=1, on_started=started)
trio.run(main)
"""
    parent = await trio.lowlevel.open_process([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                line += await parent.stdout.receive_some(100)
        child = int(line)
        with trio.fail_after(10):  # setpriv execs sleep a moment later
            while psutil.Process(child).name() != "sleep":  # noqa: ASYNC110
                await trio.sleep(0.01)
        parent.kill()  # SIGKILL: lre gets no chance to clean up
        await parent.wait()
        await no_survivors([child])
    finally:
        parent.kill()
        await parent.wait()


async def test_own_session(tmp_path: Path) -> None:
    _, (leader,) = await start(tmp_path, "ps -o sid= -p $$ > sid")
    assert int((tmp_path / "sid").read_text()) == leader
    assert os.getsid(0) != leader


async def test_started_by_long_lived_spawner_threads(tmp_path: Path) -> None:
    from lre.worker._process import _SPAWNER

    _, (leader,) = await start(tmp_path, "true")
    _, (second,) = await start(tmp_path, "true")
    threads = _SPAWNER.threads
    assert threads and all(t.daemon and t.is_alive() for t in threads)
    # the threads outlive every run (the parent-death signal follows the forking thread)
    await trio.sleep(0.05)
    assert _SPAWNER.threads == threads and all(t.is_alive() for t in threads)
    assert leader != second


async def test_start_failure_in_spawner_is_raised_to_the_caller(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(InvalidArgument, match="not-executable"):
        await run_process(
            [str(script)],
            cwd=tmp_path,
            env={},
            stdout_path=tmp_path / "out",
            stderr_path=tmp_path / "err",
            timeout=10,
            kill_grace=1,
        )
    with pytest.raises(FileNotFoundError):  # the log's directory is missing
        await run_process(
            ["/bin/true"],
            cwd=tmp_path,
            env={},
            stdout_path=tmp_path / "gone" / "out",
            stderr_path=tmp_path / "err",
            timeout=10,
            kill_grace=1,
        )


async def test_environment_is_exactly_the_commands(tmp_path: Path) -> None:
    # The parent guard's shell must not leak PWD (or anything else) into it.
    for env in ({"A": "1"}, {"A": "1", "PWD": "/somewhere/else"}):
        outcome = await run_process(
            ["/usr/bin/env"],
            cwd=tmp_path,
            env=env,
            stdout_path=tmp_path / "out",
            stderr_path=tmp_path / "err",
            timeout=10,
            kill_grace=1,
        )
        assert outcome.exit_code == 0
        lines = (tmp_path / "out").read_text().splitlines()
        assert sorted(lines) == sorted(f"{k}={v}" for k, v in env.items())


def test_parent_guard_refuses_to_run_when_lre_is_no_longer_the_parent(tmp_path: Path) -> None:
    # As if lre died before setpriv armed the death signal: the leader was
    # re-parented, so the guard must exit 137 instead of running the command.
    from lre.worker._process import _GUARD_SHELL, _setpriv_command

    assert _GUARD_SHELL is not None, "the guard needs setpriv and a dash /bin/sh"
    marker = tmp_path / "ran"
    command = _setpriv_command(["/usr/bin/touch", str(marker)], {})
    lre_pid = command.index(str(os.getpid()))
    command[lre_pid] = "1"
    assert subprocess.run(command, env={}, check=False).returncode == 137
    assert not marker.exists()
    command[lre_pid] = str(os.getpid())
    assert subprocess.run(command, env={}, check=False).returncode == 0
    assert marker.exists()


async def test_action_starts_at_the_requested_niceness(tmp_path: Path) -> None:
    # `nice` with no operand prints the niceness it runs at; the child of the
    # shell inherits it too.
    outcome, _ = await start(tmp_path, "nice; sh -c nice", nice=7)
    assert outcome.exit_code == 0  # type: ignore[attr-defined]
    assert (tmp_path / "out").read_text().split() == ["7", "7"]
    outcome, _ = await start(tmp_path, "nice")
    assert (tmp_path / "out").read_text().split() == [str(os.getpriority(os.PRIO_PROCESS, 0))]


async def test_niceness_out_of_range_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nice: 20"):
        await start(tmp_path, "true", nice=20)
