"""A real fork bomb inside an action: the kernel refuses its forks at the
per-action limit (``workers[].local.max_processes``), the action fails
naming the limit, lre keeps serving and none of the bomb survives
(``lre/worker/process/_process_limit.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc
import psutil
import pytest

from lre.config._worker_models import LocalWorkerSpec
from lre.worker.process._process_limit import CONFIG_KEY, ProcessLimits, process_limits
from tests._support.configs import WORKER_EXTRA, app_config_text
from tests._support.processes import processes_with, wait_until
from tests._support.reapi import Client, response_of
from tests._support.scratch import action_python
from tests._support.servers import ServerThread

LIMIT = 64
T = TypeVar("T")


def bomb(marker: str) -> list[str]:
    """The classic shell fork bomb; every copy's command line holds ``marker``.
    The first shell then sleeps until the action's timeout: with a plain
    ``wait`` it could exit (and its namespace with it) before the bomb met
    the limit, when its own pipeline happened to end first."""
    return ["/bin/sh", "-c", f": {marker}; b() {{ b | b & }}; b; sleep 30"]


def test_the_default_is_generous() -> None:
    # 4096 tasks: a parallel make -j64 of compilers and shells needs a few
    # hundred, a multi-threaded link or JVM a few dozen threads more.
    assert LocalWorkerSpec.__dataclass_fields__["max_processes"].default == 4096


def test_a_fork_bomb_fails_its_action_naming_the_limit_and_lre_keeps_serving(
    tmp_path: Path,
) -> None:
    limits = process_limits()
    if not limits.enforced_by_cgroup:
        # Never run an unbounded fork bomb on a shared machine.
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root with cgroup v1 pids: {limits.why_not}")
        pytest.skip(f"the process limit is not enforced by a cgroup here: {limits.why_not}")
    marker = f"bomb-{uuid.uuid4().hex}"
    text = app_config_text(
        tmp_path, extra_worker=f"{WORKER_EXTRA}, max_processes: {LIMIT}, containment: 'pidns'"
    )
    server = ServerThread(tmp_path, text)
    ready = server.start()
    try:
        with Client(ready.grpc_addresses[0]) as client:
            prepared = client.prepare(bomb(marker), timeout_s=4)
            response = response_of(client.execute(prepared, timeout=120)[-1])
            assert response.status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], response
            assert CONFIG_KEY in response.status.message
            assert f"more than {LIMIT} processes" in response.status.message
            assert wait_until(lambda: not processes_with(marker), 20), processes_with(marker)
            # lre goes on serving.
            after = client.run(["/bin/sh", "-c", "echo still here"])
            assert after.status.code == 0, after.status
            assert client.stdout(after.result) == b"still here\n"
    finally:
        server.stop()
    assert not processes_with(marker)


_PROBE = """
import os, signal, sys, time
pids = []
for _ in range(int(sys.argv[1])):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    pids.append(pid)
print(len(pids))
for pid in pids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""

_RUN_AS_NOBODY = """
import sys, trio
from pathlib import Path
from lre.worker import choose_containment
from lre.worker.process._process import SpawnRequest, run_process

async def main() -> None:
    work = Path(sys.argv[1])
    outcome = await run_process(SpawnRequest(
        ["/usr/bin/python3", "-c", sys.argv[2], "300"],
        cwd=work, env={"PATH": "/usr/bin:/bin"},
        stdout_path=work / "stdout", stderr_path=work / "stderr",
        timeout=60, kill_grace=0.5, containment=choose_containment("userns"),
        max_processes=int(sys.argv[3]),
    ))
    print(outcome.exit_code, (work / "stdout").read_text().strip())

trio.run(main)
"""


def test_an_unprivileged_lre_limits_forks_per_user_namespace() -> None:
    # lre as nobody (containment userns): RLIMIT_NPROC inside the action's
    # own user namespace counts that namespace only, not nobody's other
    # processes (30 sleepers of nobody's run meanwhile).
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root; this test switches to nobody")
        pytest.skip("needs root to run as another user")
    import shutil
    import subprocess
    import tempfile

    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    # Outside pytest's 0700 temporary directories, which nobody cannot enter.
    work = Path(tempfile.mkdtemp(prefix="lre-nproc-"))
    os.chown(work, 65534, 65534)
    marker = f"1000.{uuid.uuid4().int % 10**9:09d}"
    sleepers = [subprocess.Popen([*as_nobody, "sleep", marker]) for _ in range(30)]
    try:
        ran = subprocess.run(
            [*as_nobody, sys.executable, "-c", _RUN_AS_NOBODY, str(work), _PROBE, str(LIMIT)],
            capture_output=True,
            text=True,
            cwd="/",
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).parents[2])},
            timeout=120,
            check=False,
        )
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        shutil.rmtree(work)
    assert ran.returncode == 0, ran.stderr
    exit_code, forked = ran.stdout.split()[-2:]
    assert exit_code == "0", ran.stdout
    # The probe itself and pid 1 of the namespace count too.
    assert LIMIT - 4 <= int(forked) < LIMIT, ran.stdout


# A bounded probe: forks up to 40 sleepers (a limit of 8 refuses most), then
# kills them; the action's refusals are then counted in its cgroup.
_FORKS = [action_python(), "-c", _PROBE, "40"]


def _cgroup_limits() -> ProcessLimits:
    """This process's ``ProcessLimits`` (one per process: its cgroups are
    named by pid), when a cgroup enforces the limit here."""
    limits = process_limits()
    if not limits.enforced_by_cgroup:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root with cgroup v1 pids: {limits.why_not}")
        pytest.skip(f"no pids cgroup here: {limits.why_not}")
    return limits


def _action(limits: ProcessLimits, argv: list[str], limit: int) -> tuple[bool, Path, str]:
    """One action spawned as a spawner thread spawns it: (whether a fork was
    refused, the cgroup it ran in, its stdout)."""
    with limits.around_fork(limit):
        popen = subprocess.Popen(argv, stdout=subprocess.PIPE, close_fds=True)
    limits.started(popen.pid)
    group = limits._by_pid[popen.pid][0].path
    out, _ = popen.communicate(timeout=120)
    return limits.ended(popen.pid), group, out.decode().strip()


def _in_thread(work: Callable[[], T]) -> T:
    """``work()``'s result, run in a thread of its own (a spawner thread)."""
    results: list[T] = []
    failures: list[BaseException] = []

    def body() -> None:
        try:
            results.append(work())
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]
    return results[0]


def test_a_reused_cgroup_reports_only_its_own_actions_refusals() -> None:
    # Cgroups are reused and pids.events only grows: each action is judged
    # against the count its cgroup had when the action started.
    limits = _cgroup_limits()

    def three_actions() -> list[tuple[bool, Path, str]]:
        return [
            _action(limits, _FORKS, 8),
            _action(limits, ["/bin/true"], 8),
            _action(limits, _FORKS, 8),
        ]

    (bomb_hit, first, forked), (quiet_hit, second, _), (again_hit, third, _) = _in_thread(
        three_actions
    )
    assert first == second == third  # one cgroup, reused in place
    assert int(forked) < 8, forked
    assert bomb_hit
    assert not quiet_hit
    assert again_hit


def test_only_the_spawner_thread_moves_into_an_actions_cgroup() -> None:
    # lre's other threads (the event loop, gRPC) stay where they were: were
    # the whole process moved, every later action's count would include them.
    limits = _cgroup_limits()
    main_thread = threading.get_native_id()
    before = Path(f"/proc/self/task/{main_thread}/cgroup").read_text()

    def spawn() -> tuple[str, Path]:
        _, group, _ = _action(limits, ["/bin/true"], 8)
        return Path("/proc/thread-self/cgroup").read_text(), group

    spawner_cgroup, group = _in_thread(spawn)
    assert Path(f"/proc/self/task/{main_thread}/cgroup").read_text() == before
    assert f"pids:/{group.relative_to(limits.root)}\n" in spawner_cgroup


def _descriptors_on(group: Path) -> list[str]:
    """This process's open files inside ``group``."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target.startswith(f"{group}/"):
            found.append(target)
    return found


def _kill(marker: str) -> None:
    """SIGKILL the processes this test started (found by their marker)."""
    for process in processes_with(marker):
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def test_a_process_left_in_a_cgroup_keeps_it_from_the_next_action() -> None:
    # Without a PID namespace a background child outlives its action: the
    # spawner thread's next action must not be born next to it (the kept
    # pids.current is read afresh), and the left cgroup's descriptors close.
    limits = _cgroup_limits()
    marker = f"1000.{uuid.uuid4().int % 10**9:09d}"
    leftover = ["/bin/sh", "-c", f"sleep {marker} >/dev/null 2>&1 & echo started"]

    def two_actions() -> tuple[Path, Path, list[str], int]:
        _, first, _ = _action(limits, leftover, 8)
        _, second, _ = _action(limits, ["/bin/true"], 8)
        return first, second, _descriptors_on(first), limits.descriptors

    try:
        first, second, still_open, counted = _in_thread(two_actions)
        assert processes_with(marker), "the background child should still run"
        assert first != second
        assert still_open == []
        # What lre's leak checks allow for: every open cgroup's three (the
        # second's among them), not the closed one's.
        assert len(_descriptors_on(second)) == 3
        assert limits.base is not None
        assert counted == len(_descriptors_on(limits.base))
    finally:
        _kill(marker)


def test_two_running_actions_of_one_thread_count_apart() -> None:
    # A spawner thread's next action starts while its last one still runs:
    # it gets a cgroup of its own and the whole limit, whatever the running
    # one holds (four sleepers and their shell).
    limits = _cgroup_limits()
    marker = f"1000.{uuid.uuid4().int % 10**9:09d}"
    sleepers = ["/bin/sh", "-c", " & ".join([f"sleep {marker}"] * 4) + " & wait"]

    def overlapping() -> tuple[Path, Path, str]:
        with limits.around_fork(8):
            running = subprocess.Popen(sleepers, close_fds=True)
        limits.started(running.pid)
        try:
            # The four sleepers and their shell.
            assert wait_until(lambda: len(processes_with(marker)) == 5, 20)
            _, second, forked = _action(limits, _FORKS, 8)
        finally:
            running.kill()
            _kill(marker)
            running.wait()
        first = limits._by_pid[running.pid][0].path
        limits.ended(running.pid)
        return first, second, forked

    first, second, forked = _in_thread(overlapping)
    assert first != second
    # pids.max is 8 + the spawner thread, which sits in the cgroup with the
    # probe: 7 forks, none taken by the other action's five tasks.
    assert int(forked) == 7, forked
