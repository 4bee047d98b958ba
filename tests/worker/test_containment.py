"""Containment backends: nothing an action starts outlives it, whatever it does.

Every test runs with each backend this machine has (``pidns`` needs
CAP_SYS_ADMIN; CI runs as root, so there it must be available). The
processes an action leaves behind are found by a unique ``sleep`` argument:
pids printed from inside a PID namespace are not the ones seen from here.
"""

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

from lre.worker import Containment, ContainmentUnavailable, choose_containment
from lre.worker.containment._containment import ProcessGroupSweep
from lre.worker.process._process import SpawnRequest, run_process

_BACKENDS: dict[str, Containment] = {}


def backend(mode: str) -> Containment:
    """One backend object per mode for the whole test session (each has a guardian)."""
    if mode not in _BACKENDS:
        try:
            _BACKENDS[mode] = choose_containment(mode)
        except ContainmentUnavailable as error:
            pytest.skip(f"containment {mode!r} unavailable here: {error}")
    return _BACKENDS[mode]


@pytest.fixture(params=["pidns", "userns", "portable"])
def containment(request: pytest.FixtureRequest) -> Containment:
    return backend(request.param)


def token() -> str:
    """A ``sleep`` argument no other process uses."""
    return f"{4000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9:09d}"


def sleepers(marker: str) -> list[int]:
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if (process.info["cmdline"] or [""])[-2:] == ["sleep", marker]:
            found.append(process.pid)
    return found


async def gone(marker: str, within: float = 1.0) -> bool:
    """True once no ``sleep marker`` runs, checked for ``within`` seconds."""
    with trio.move_on_after(within):
        while sleepers(marker):  # noqa: ASYNC110 (polling other processes)
            await trio.sleep(0.01)
    return not sleepers(marker)


async def started(marker: str, count: int = 1) -> None:
    # Generous: on a loaded machine the stand-in lre's start (a Python with
    # trio and lre to import) alone can take many seconds.
    with trio.fail_after(60):
        while len(sleepers(marker)) < count:  # noqa: ASYNC110
            await trio.sleep(0.01)


async def run(tmp_path: Path, containment: Containment, script: str, **kwargs: object) -> object:
    return await run_process(
        SpawnRequest(
            ["/bin/sh", "-c", script],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            stdout_path=tmp_path / "out",
            stderr_path=tmp_path / "err",
            containment=containment,
            **{"timeout": 30.0, "kill_grace": 0.3, **kwargs},  # type: ignore[arg-type]
        )
    )


# The three ways a process escapes its action's process group.
ESCAPES = {
    "background": "sleep {t} &",
    "setsid": "setsid sleep {t} &",
    "double-fork": "sh -c 'setsid sh -c \"sleep {t}\" & exit 0'; sleep 0.05;",
}


def group_of(marker: str) -> int | None:
    """The process group of the one ``sleep marker`` (None: not running)."""
    found = sleepers(marker)
    if len(found) != 1:
        return None
    try:
        return os.getpgid(found[0])
    except ProcessLookupError:
        return None


@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_escapes_die_when_the_action_exits(
    tmp_path: Path, containment: Containment, escape: str
) -> None:
    """The action ends only once its escape is really out of its process group
    (a ``sleep`` that stays in it shows the group): otherwise the group kill
    at the end would catch a setsid child that had not yet called setsid, and
    the orphan sweep (``ProcessGroupSweep.end``) would go untested."""
    marker, member = token(), token()
    script = (
        f"sleep {member} & "
        + ESCAPES[escape].format(t=marker)
        + " while [ ! -e go ]; do sleep 0.01; done; exit 0"
    )
    outcomes: list[object] = []

    async def action() -> None:
        outcomes.append(await run(tmp_path, containment, script))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(action)
        await started(marker)
        await started(member)
        if escape != "background":
            with trio.fail_after(30):
                while group_of(marker) in (None, group_of(member)):  # noqa: ASYNC110
                    await trio.sleep(0.01)
        (tmp_path / "go").touch()
    (outcome,) = outcomes
    assert outcome.exit_code == 0  # type: ignore[attr-defined]
    assert outcome.ended_alone  # type: ignore[attr-defined]
    assert await gone(member), f"the group member survived its action under {containment.name}"
    assert await gone(marker), f"{escape}: survived its action under {containment.name}"


@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_escapes_die_on_timeout_and_on_cancel(
    tmp_path: Path, containment: Containment, escape: str
) -> None:
    marker = token()
    script = ESCAPES[escape].format(t=marker) + " exec sleep 300"
    with trio.fail_after(10):
        outcome = await run(tmp_path, containment, script, timeout=0.5)
    assert outcome.timed_out  # type: ignore[attr-defined]
    assert await gone(marker), f"{escape}: survived a timeout under {containment.name}"

    marker = token()
    script = ESCAPES[escape].format(t=marker) + " exec sleep 300"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, tmp_path, containment, script)
        await started(marker)
        nursery.cancel_scope.cancel()
    assert await gone(marker), f"{escape}: survived a cancel under {containment.name}"


async def test_a_script_that_kills_itself_is_reported_killed(
    tmp_path: Path, containment: Containment
) -> None:
    # Under pidns the command must not be the namespace's pid 1 (which ignores
    # such signals and would exit 0: a wrong, cacheable result).
    outcome = await run(tmp_path, containment, "kill -SEGV $$; echo survived")
    assert outcome.exit_code == 128 + signal.SIGSEGV  # type: ignore[attr-defined]
    assert outcome.signal == signal.SIGSEGV  # type: ignore[attr-defined]
    assert (tmp_path / "out").read_bytes() == b""
    outcome = await run(tmp_path, containment, "kill -TERM $$; echo survived")
    assert outcome.exit_code == 128 + signal.SIGTERM  # type: ignore[attr-defined]


async def test_a_timed_out_command_gets_sigterm_before_the_kill(
    tmp_path: Path, containment: Containment
) -> None:
    # The command's SIGTERM handler runs within the kill grace: pid 1 in
    # front of it (GNU time) stays in the group lre signals.
    script = "trap 'echo terminated >&2; exit 7' TERM; sleep 60 & wait"
    outcome = await run(tmp_path, containment, script, timeout=1.0, kill_grace=20.0)
    assert outcome.timed_out, outcome  # type: ignore[attr-defined]
    assert (tmp_path / "err").read_text() == "terminated\n", outcome
    assert outcome.exit_code == 7, outcome  # type: ignore[attr-defined]


LRE_STANDIN = """
import sys, trio
from pathlib import Path
from lre.worker import choose_containment
from lre.worker.process._process import SpawnRequest, run_process

async def main():
    containment = choose_containment(sys.argv[1])
    async with trio.open_nursery() as nursery:
        await nursery.start(containment.watch)
        await run_process(SpawnRequest(["/bin/sh", "-c", sys.argv[2]], cwd=Path(sys.argv[3]),
            env={"PATH": "/usr/bin:/bin"}, stdout_path=Path(sys.argv[3]) / "o",
            stderr_path=Path(sys.argv[3]) / "e", timeout=300, kill_grace=1,
            containment=containment))
trio.run(main)
"""


async def test_everything_dies_within_a_second_of_lre_being_sigkilled(
    tmp_path: Path, containment: Containment
) -> None:
    markers = {name: token() for name in ESCAPES}
    script = " ".join(ESCAPES[name].format(t=markers[name]) for name in sorted(ESCAPES))
    script += f" exec sleep {token()}"
    lre = await trio.lowlevel.open_process(
        [sys.executable, "-c", LRE_STANDIN, containment.name, script, str(tmp_path)],
        stdin=subprocess.DEVNULL,
    )
    try:
        for marker in markers.values():
            await started(marker)
        await trio.sleep(0.6)  # the portable backend lists orphans every 0.25 s
        lre.kill()  # SIGKILL: no clean-up in lre at all
        await lre.wait()
        for name, marker in markers.items():
            assert await gone(marker, within=1.0), f"{name} outlived lre ({containment.name})"
    finally:
        lre.kill()
        await lre.wait()


async def test_portable_keeps_an_orphan_another_running_action_may_own(tmp_path: Path) -> None:
    sweep = backend("portable")
    assert isinstance(sweep, ProcessGroupSweep)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    slow = token()
    orphan = token()
    async with trio.open_nursery() as nursery:
        outcomes: list[object] = []

        async def b() -> None:
            outcomes.append(await run(tmp_path / "b", sweep, f"exec sleep {slow}"))

        nursery.start_soon(b)
        await started(slow)
        await trio.sleep(0.05)  # A starts strictly after B
        first = await run(tmp_path / "a", sweep, ESCAPES["double-fork"].format(t=orphan))
        # B was running when A's orphan was born: it may be B's, so it lives
        # on, and A's directory must not be reused nor its files moved.
        assert not first.ended_alone  # type: ignore[attr-defined]
        assert sleepers(orphan)
        for pid in sleepers(slow):
            os.kill(pid, signal.SIGTERM)
    assert await gone(orphan), "the orphan outlived every action that could own it"


def test_an_unprivileged_lre_gets_user_namespaces(tmp_path: Path) -> None:
    # What a laptop user (not root) gets from "strongest": run the choice as
    # nobody. Needs root to switch users; CI runs as root.
    if os.geteuid() != 0:
        pytest.skip("needs root to run as another user")
    code = "from lre.worker import choose_containment; print(choose_containment('strongest').name)"
    chosen = subprocess.run(
        [
            *("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"),
            *(sys.executable, "-c", code),
        ],
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).parents[2])},
        check=False,
        timeout=60,
    )
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.split()[-1] == "userns"


async def test_userns_reports_a_killed_action_as_not_alone(tmp_path: Path) -> None:
    # unshare is reaped a moment before its namespace is gone when lre kills
    # it: such an action's directory must not be reused.
    containment = backend("userns")
    marker = token()
    outcome = await run(
        tmp_path, containment, f"setsid sleep {marker} & exec sleep 300", timeout=0.3
    )
    assert outcome.timed_out  # type: ignore[attr-defined]
    assert not outcome.ended_alone  # type: ignore[attr-defined]
    assert await gone(marker)
