"""Process groups: nothing an action starts outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import trio

from lre.errors import InvalidArgument
from lre.worker.containment import WRAPPER_LABEL
from lre.worker.process._process import SpawnRequest, _labelled, _name_matters, run_process


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
        SpawnRequest(
            ["/bin/sh", "-c", script],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            stdout_path=tmp_path / "out",
            stderr_path=tmp_path / "err",
            on_started=leaders.append,
            **{"timeout": 30.0, "kill_grace": 0.5, **kwargs},  # type: ignore[arg-type]
        )
    )
    return outcome, leaders


def marked(token: str) -> list[int]:
    """Live ``sleep token`` processes (pids printed by a
    process inside a PID namespace are not the ones seen from here)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if (process.info["cmdline"] or [""])[-2:] == ["sleep", token]:
            found.append(process.pid)
    return found


def unique_sleep() -> str:
    """A ``sleep`` argument no other process uses."""
    return f"{3000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9:09d}"


async def test_background_child_dies_with_the_action(tmp_path: Path) -> None:
    token = unique_sleep()
    outcome, (leader,) = await start(tmp_path, f"sleep {token} & exit 0")
    assert outcome.exit_code == 0  # type: ignore[attr-defined]
    await no_survivors(marked(token))
    assert marked(token) == []
    assert await group_drains(leader) == []


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    token = unique_sleep()
    script = f"trap '' TERM; (sleep {token} & wait) & echo partial; sleep 300"
    with trio.fail_after(10):
        outcome, (leader,) = await start(tmp_path, script, timeout=2.0, kill_grace=0.3)
    assert outcome.timed_out  # type: ignore[attr-defined]
    assert outcome.signal == signal.SIGKILL  # type: ignore[attr-defined]
    assert (tmp_path / "out").read_bytes() == b"partial\n"
    await no_survivors(marked(token))
    assert marked(token) == []
    assert await group_drains(leader) == []


async def test_sigterm_first_then_grace(tmp_path: Path) -> None:
    script = "trap 'echo got-term; exit 7' TERM; sleep 300 & wait"
    outcome, _ = await start(tmp_path, script, timeout=0.3, kill_grace=5)
    assert outcome.timed_out and outcome.exit_code == 7  # type: ignore[attr-defined]
    assert b"got-term" in (tmp_path / "out").read_bytes()


async def test_cancel_mid_run_kills_and_reaps(tmp_path: Path) -> None:
    leaders: list[int] = []
    token = unique_sleep()
    with trio.move_on_after(0.5) as scope:
        await run_process(
            SpawnRequest(
                ["/bin/sh", "-c", f"sleep {token} & sleep 300"],
                cwd=tmp_path,
                env={},
                stdout_path=tmp_path / "out",
                stderr_path=tmp_path / "err",
                timeout=30,
                kill_grace=0.5,
                on_started=leaders.append,
            )
        )
    assert scope.cancelled_caught
    (leader,) = leaders
    with pytest.raises(ChildProcessError):
        os.waitpid(leader, os.WNOHANG)  # noqa: ASYNC222 (already reaped: no zombie left)
    await no_survivors([leader, *marked(token)])
    assert marked(token) == []


async def test_leader_dies_when_lre_is_killed(tmp_path: Path) -> None:
    code = f"""
import sys, trio
from pathlib import Path
from lre.errors import InvalidArgument
from lre.worker.containment import WRAPPER_LABEL
from lre.worker.process._process import SpawnRequest, _labelled, _name_matters, run_process
async def main():
    def started(pid):
        print(pid, flush=True)
    await run_process(SpawnRequest(["sleep", "300"], cwd=Path({str(tmp_path)!r}), env={{}},
        stdout_path=Path({str(tmp_path / "o")!r}), stderr_path=Path({str(tmp_path / "e")!r}),
        timeout=300, kill_grace=1, on_started=started))
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
        with trio.fail_after(10):  # the init execs sleep a moment later
            while not any(p.name() == "sleep" for p in psutil.Process(child).children()):  # noqa: ASYNC110
                await trio.sleep(0.01)
        sleeper = psutil.Process(child).children()[0].pid
        parent.kill()  # SIGKILL: lre gets no chance to clean up
        await parent.wait()
        await no_survivors([child, sleeper])
    finally:
        parent.kill()
        await parent.wait()


async def test_own_session(tmp_path: Path) -> None:
    token = unique_sleep()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(start, tmp_path, f"sleep {token}")
        with trio.fail_after(10):
            while not marked(token):  # noqa: ASYNC110 (polling another process)
                await trio.sleep(0.01)
        (sleeper,) = marked(token)
        assert os.getsid(sleeper) == os.getpgid(sleeper) != os.getsid(0)
        os.kill(sleeper, signal.SIGKILL)


def kernel_name(native_id: int | None) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


async def test_started_by_long_lived_spawner_threads(tmp_path: Path) -> None:
    from lre.worker.process._process import _SPAWNER

    _, (leader,) = await start(tmp_path, "true")
    _, (second,) = await start(tmp_path, "true")
    threads = _SPAWNER.threads
    assert threads and all(t.daemon and t.is_alive() for t in threads)
    # named where top -H and bench/bench_capacity.py see them
    for thread in threads:
        assert kernel_name(thread.native_id) == thread.name.encode()[:15].decode()
    # the threads outlive every run (the parent-death signal follows the forking thread)
    await trio.sleep(0.05)
    assert _SPAWNER.threads == threads and all(t.is_alive() for t in threads)
    assert leader != second


async def test_start_failure_in_spawner_is_raised_to_the_caller(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(InvalidArgument, match="not-executable"):
        await run_process(
            SpawnRequest(
                [str(script)],
                cwd=tmp_path,
                env={},
                stdout_path=tmp_path / "out",
                stderr_path=tmp_path / "err",
                timeout=10,
                kill_grace=1,
            )
        )
    with pytest.raises(FileNotFoundError):  # the log's directory is missing
        await run_process(
            SpawnRequest(
                ["/bin/true"],
                cwd=tmp_path,
                env={},
                stdout_path=tmp_path / "gone" / "out",
                stderr_path=tmp_path / "err",
                timeout=10,
                kill_grace=1,
            )
        )


async def test_environment_is_exactly_the_commands(tmp_path: Path) -> None:
    # Nothing between lre and the command may add to the environment.
    for env in ({"A": "1"}, {"A": "1", "PWD": "/somewhere/else"}):
        outcome = await run_process(
            SpawnRequest(
                ["/usr/bin/env"],
                cwd=tmp_path,
                env=env,
                stdout_path=tmp_path / "out",
                stderr_path=tmp_path / "err",
                timeout=10,
                kill_grace=1,
            )
        )
        assert outcome.exit_code == 0
        lines = (tmp_path / "out").read_text().splitlines()
        assert sorted(lines) == sorted(f"{k}={v}" for k, v in env.items())


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


def test_a_wrapper_whose_name_matters_keeps_it_by_the_file_it_resolves_to(
    tmp_path: Path,
) -> None:
    """A wrapper shown as ``WRAPPER_LABEL`` unless its behaviour hangs on its
    name: a shell keeps argv[0] even when reached through a link of another
    name, and the answer for one program is reached once, not per action."""
    shell = tmp_path / "gate"
    shell.symlink_to("/bin/sh")
    timeout = tmp_path / "timeout"
    timeout.symlink_to("/usr/bin/timeout")
    _name_matters.cache_clear()
    assert _labelled([str(shell), "-c", ":"], wrapped=True) == [str(shell), "-c", ":"]
    assert _labelled([str(timeout), "0", "true"], wrapped=True) == [WRAPPER_LABEL, "0", "true"]
    assert _labelled([str(timeout), "0", "true"], wrapped=False)[0] == str(timeout)
    for _ in range(3):
        _labelled([str(shell), "-c", ":"], wrapped=True)
    assert _name_matters.cache_info().misses == 2
