"""Freeze, thaw and kill of real actions (lre/worker/memory/_memory_control.py).

Most tests give the worker a ``PressureMonitor`` whose MemAvailable the test
sets; the last one holds real memory in a process outside lre and lets the
real ``/proc/meminfo`` reading see it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest
import trio

from lre.cas import MemoryStore
from lre.config import ByteSize, worker_resources
from lre.config._scheduler_models import SimpleSchedulerSpec
from lre.config._worker_models import ResourceSpec
from lre.proto import lre_pb2
from lre.scheduler import OperationSnapshot, ResourcePolicy, Scheduler
from lre.worker import LocalWorker, MemoryAction, PressureMonitor
from lre.worker.memory._pressure import read_mem_available
from tests._support.scratch import action_python

from .conftest import make_spec
from .test_worker import finish, submit

MiB = 1 << 20
GiB = 1 << 30

#: argv: marker, MiB to grow to (4 MiB every 50 ms), stop file. Grows, then
#: waits for the stop file (which also ends the growth early).
GROW = """
import os, sys, time
limit, stop = int(sys.argv[2]), sys.argv[3]
chunks = []
while len(chunks) * 4 < limit and not os.path.exists(stop):
    b = bytearray(4 << 20); b[::4096] = b"x" * len(b[::4096]); chunks.append(b)
    time.sleep(0.05)
while not os.path.exists(stop):
    time.sleep(0.02)
"""


#: The same growth kept in the action's private /dev/shm (a view's tmpfs):
#: the process stays small, the file holds the memory.
GROW_TMPFS = """
import os, sys, time
limit, stop = int(sys.argv[2]), sys.argv[3]
written = 0
with open("/dev/shm/hold", "wb") as held:
    while written < limit and not os.path.exists(stop):
        held.write(b"x" * (4 << 20)); held.flush(); written += 4
        time.sleep(0.05)
    while not os.path.exists(stop):
        time.sleep(0.02)
"""


def argv(marker: str, limit_mib: int, stop: Path, script: str = GROW) -> list[str]:
    return [action_python(), "-c", script, marker, str(limit_mib), str(stop)]


def processes_of(marker: str) -> list[psutil.Process]:
    """The action's processes, found from outside by the marker in their argv."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in (process.info["cmdline"] or ()):
            found.append(process)
    return found


def cgroup_frozen(pid: int) -> bool:
    """Whether ``pid`` sits in a v1 freezer cgroup whose state is FROZEN."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(","):
            state = Path("/sys/fs/cgroup/freezer") / path.lstrip("/") / "freezer.state"
            try:
                return state.read_text().strip() == "FROZEN"
            except OSError:
                return False
    return False


def stopped(marker: str) -> bool | None:
    """True when every process of the action is stopped (SIGSTOP) or frozen
    by a cgroup; None when none is seen."""
    found = processes_of(marker)
    if not found:
        return None
    try:
        return all(p.status() == psutil.STATUS_STOPPED or cgroup_frozen(p.pid) for p in found)
    except psutil.NoSuchProcess:
        return None


async def until(check: Callable[[], object], timeout: float = 120.0) -> None:
    """Poll ``check`` (state of other processes: no event to wait for). The
    timeout only stops a hung test: on a machine at load 20 a 400 MiB action
    took over 20 s to be frozen, so it is no measure of speed."""
    with trio.fail_after(timeout):
        while not check():  # noqa: ASYNC110
            await trio.sleep(0.02)


def registered(worker: LocalWorker) -> int:
    """Actions the worker's sampler (and memory control) know as started."""
    return len(worker.statistics().usage)


@asynccontextmanager
async def running(
    store: MemoryStore,
    tmp_path: Path,
    resources: ResourceSpec,
    pressure: PressureMonitor | None,  # None: the host's, as the app builds it
    policy: ResourcePolicy | None = None,
    **spec_overrides: object,
) -> AsyncIterator[tuple[Scheduler, LocalWorker]]:
    spec = make_spec(
        tmp_path, resources=resources, sandbox_writable_paths=(str(tmp_path),), **spec_overrides
    )
    scheduler = Scheduler(SimpleSchedulerSpec(), cas=store, resources=policy)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        worker = LocalWorker(
            spec,
            resources=worker_resources(spec),
            scheduler=scheduler,
            store=store,
            pressure=pressure or PressureMonitor(int(resources.memory_headroom)),
        )
        await nursery.start(worker.run)
        yield scheduler, worker
        nursery.cancel_scope.cancel()


async def test_the_memory_control_row_names_its_worker_and_the_readings(
    tmp_path: Path, store: MemoryStore
) -> None:
    """What the snapshot shows of a worker's memory control comes from the
    control itself, named after its worker, with the host's last reading."""
    pressure = PressureMonitor(2 * GiB, available=lambda: 3 * GiB, pressure=lambda: 1.5, cache_s=0)
    async with running(store, tmp_path, governed(), pressure) as (_, worker):
        pressure.read()
        row = worker.statistics().memory
        assert row is not None and row == worker.memory.statistics()
        assert row.worker == worker.name == "w1"
        assert (row.available_bytes, row.pressure_full_avg10) == (3 * GiB, 1.5)
        assert (row.frozen_now, row.frozen_leases, row.short_reason) == (0, (), "")


class OldAndNew(NamedTuple):
    """An idle oldest action and a growing newest one, each found from outside
    by its marker; their stop files end them."""

    old: OperationSnapshot
    new: OperationSnapshot
    old_marker: str
    new_marker: str
    stop_old: Path
    stop_new: Path


async def start_old_and_new(
    scheduler: Scheduler,
    worker: LocalWorker,
    store: MemoryStore,
    tmp_path: Path,
    grow_mib: int,
    script: str = GROW,
) -> OldAndNew:
    """Start the oldest (idle), then the newest (growing to ``grow_mib`` by
    ``script``); each once the worker's sampler knows the one before, so lre
    sees the same order."""
    old_marker, new_marker = f"old-{tmp_path.name}", f"new-{tmp_path.name}"
    stop_old, stop_new = tmp_path / "stop-old", tmp_path / "stop-new"
    old = await submit(scheduler, store, argv(old_marker, 0, stop_old))
    await until(lambda: processes_of(old_marker))
    await until(lambda: registered(worker) == 1)  # the oldest, also to lre
    new = await submit(scheduler, store, argv(new_marker, grow_mib, stop_new, script))
    await until(lambda: processes_of(new_marker))
    await until(lambda: registered(worker) == 2)
    return OldAndNew(old, new, old_marker, new_marker, stop_old, stop_new)


def governed(**kw: object) -> ResourceSpec:
    values: dict[str, object] = {
        "cpu_count": 4,
        "sample_interval": 0.05,
        "pressure_sample_interval": 0.02,
        "memory_headroom": ByteSize(2 * GiB),
        "memory_hard_floor": ByteSize(1 * GiB),
        "thaw_interval": 0.1,
        "max_frozen": 60.0,
    }
    values.update(kw)
    return ResourceSpec(**values)  # type: ignore[arg-type]


async def test_an_action_over_its_reservation_on_an_idle_machine_is_not_killed(
    tmp_path: Path, store: MemoryStore
) -> None:
    spec = make_spec(tmp_path, resources=ResourceSpec(sample_interval=0.05))
    policy = ResourcePolicy(cold_memory_bytes=40 << 20, ladder=(512 << 20,), max_steps=3)
    available = [16 * GiB]
    pressure = PressureMonitor(2 * GiB, available=lambda: available[0], pressure=lambda: None)
    grow = "import time; b = bytearray(150 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1)"
    async with running(store, tmp_path, spec.resources, pressure, policy) as (scheduler, worker):
        op = await submit(scheduler, store, [action_python(), "-c", grow])
        done = await finish(scheduler, op.name)
        memory = worker.statistics().memory
    assert done.result is not None and done.result.exit_code == 0, done.error
    usage = lre_pb2.ResourceUsage()
    assert done.result.execution_metadata.auxiliary_metadata[0].Unpack(usage)
    assert usage.ladder_step == 0 and usage.attempt == 1
    assert usage.reserved_memory_bytes == 40 << 20 and usage.peak_rss_bytes > 150 << 20
    assert memory is not None and (memory.killed, memory.frozen) == (0, 0)
    assert "memory control" not in done.message


async def test_short_memory_freezes_the_newest_action_and_thaws_it_later(
    tmp_path: Path, store: MemoryStore
) -> None:
    available = [16 * GiB]
    pressure = PressureMonitor(2 * GiB, available=lambda: available[0], pressure=lambda: None)
    acts: list[MemoryAction] = []
    async with running(store, tmp_path, governed(), pressure) as (scheduler, worker):
        worker.memory.on_event = acts.append
        started = await start_old_and_new(scheduler, worker, store, tmp_path, 400)
        old, new, old_marker, new_marker, stop_old, stop_new = started
        available[0] = int(1.5 * GiB)  # short: someone else took the memory
        await until(lambda: stopped(new_marker))
        assert stopped(old_marker) is False  # never the oldest
        memory = worker.statistics().memory
        assert memory is not None and memory.frozen_now == 1 and memory.short_reason
        await trio.sleep(0.3)
        assert stopped(new_marker) and stopped(old_marker) is False
        available[0] = 16 * GiB
        await until(lambda: stopped(new_marker) is False)
        stop_old.touch()
        stop_new.touch()
        done_old = await finish(scheduler, old.name)
        done_new = await finish(scheduler, new.name)
        memory = worker.statistics().memory
    for done in (done_old, done_new):
        assert done.result is not None and done.result.exit_code == 0, done.error
    assert memory is not None
    assert (memory.frozen, memory.thawed, memory.killed, memory.frozen_now) == (1, 1, 0, 0)
    # each act is told, naming the action, its RSS and why
    assert [a.kind for a in acts] == ["freeze", "thaw"]
    freeze, thaw = acts
    assert freeze.action_id == thaw.action_id and freeze.rss_bytes > 0
    assert "MemAvailable 1536 MiB is under the headroom" in freeze.reason
    assert freeze.method in ("SIGSTOP", "cgroup freezer")
    assert thaw.reason.startswith("memory freed: host MemAvailable 16384 MiB")
    assert thaw.frozen_seconds >= 0.3 and thaw.rss_bytes > 0


async def test_what_an_action_keeps_in_dev_shm_counts_against_the_budget(
    tmp_path: Path, store: MemoryStore
) -> None:
    """The host has memory to spare, but the actions' memory passes the
    worker's budget: the newest action, holding it in its private /dev/shm
    (its process stays small), is frozen as one holding it in RSS would be."""
    pressure = PressureMonitor(2 * GiB, available=lambda: 16 * GiB, pressure=lambda: None)
    resources = governed(memory_budget=ByteSize(512 * MiB))
    acts: list[MemoryAction] = []
    async with running(store, tmp_path, resources, pressure) as (scheduler, worker):
        worker.memory.on_event = acts.append
        started = await start_old_and_new(scheduler, worker, store, tmp_path, 480, GROW_TMPFS)
        old, new, old_marker, new_marker, stop_old, stop_new = started
        await until(lambda: stopped(new_marker))
        memory = worker.statistics().memory
        assert memory is not None and memory.frozen_now == 1
        # why, as told when it froze (the short reason of now may be gone
        # once the frozen action stops growing; a slow machine may see it
        # thawed and frozen again meanwhile)
        assert acts[0].kind == "freeze" and "512 MiB budget" in acts[0].reason, acts
        assert stopped(old_marker) is False
        stop_old.touch()
        stop_new.touch()
        done_old = await finish(scheduler, old.name)
        done_new = await finish(scheduler, new.name)
    for done in (done_old, done_new):
        assert done.result is not None and done.result.exit_code == 0, done.error


@pytest.mark.parametrize("script", [GROW, GROW_TMPFS], ids=["rss", "tmpfs"])
async def test_under_the_hard_floor_the_frozen_action_is_killed_and_retried_one_step_up(
    tmp_path: Path, store: MemoryStore, script: str
) -> None:
    """Whether it holds its memory in its processes or in its private
    /dev/shm, the growing action is frozen, killed and laddered."""
    available = [16 * GiB]
    dips = [0]  # readings left under the floor

    def read() -> int:
        if dips[0]:
            dips[0] -= 1
            return 512 * MiB
        return available[0]

    pressure = PressureMonitor(2 * GiB, available=read, pressure=lambda: None, cache_s=0)
    policy = ResourcePolicy(cold_memory_bytes=64 * MiB, ladder=(512 * MiB,), max_steps=3)
    async with running(store, tmp_path, governed(), pressure, policy) as (scheduler, worker):
        started = await start_old_and_new(scheduler, worker, store, tmp_path, 400, script)
        old, new, old_marker, new_marker, stop_old, stop_new = started
        available[0] = int(1.5 * GiB)
        await until(lambda: stopped(new_marker))
        stop_new.touch()  # the retry ends at once
        dips[0] = 1  # freezing freed nothing: a reading under the floor
        await until(lambda: (worker.statistics().memory or memory_none).killed == 1)
        assert stopped(old_marker) is False
        available[0] = 16 * GiB
        done_new = await finish(scheduler, new.name)
        stop_old.touch()
        done_old = await finish(scheduler, old.name)
    assert done_old.result is not None and done_old.result.exit_code == 0
    assert done_new.result is not None and done_new.result.exit_code == 0, done_new.error
    usage = lre_pb2.ResourceUsage()
    assert done_new.result.execution_metadata.auxiliary_metadata[0].Unpack(usage)
    assert usage.ladder_step == 1 and usage.reserved_memory_bytes == 512 * MiB
    assert "lre memory control: killed at" in done_new.message
    assert "hard floor" in done_new.message and "ladder step 1" in done_new.message


class _NoMemory:
    killed = 0


memory_none = _NoMemory()


async def test_a_real_process_outside_lre_holding_memory_freezes_the_newest_action(
    tmp_path: Path, store: MemoryStore
) -> None:
    """A real outside hog of 700 MiB; the "short" line is drawn 300 MiB under
    what is available when the test starts, so it needs no full machine."""
    start = read_mem_available()
    headroom = start - 300 * MiB
    resources = governed(
        memory_headroom=ByteSize(headroom), memory_hard_floor=ByteSize(0), sample_interval=0.1
    )
    hog_code = (
        "import sys, time; b = bytearray(700 << 20); b[::4096] = b'x' * len(b[::4096]); "
        "print('held', flush=True); time.sleep(120)"
    )
    async with running(store, tmp_path, resources, None) as (scheduler, worker):
        # the newest grows 80 MiB/s for 5 s, to 400 MiB
        started = await start_old_and_new(scheduler, worker, store, tmp_path, 400)
        old, new, old_marker, new_marker, stop_old, stop_new = started
        hog = subprocess.Popen(  # noqa: ASYNC220 (a plain outside process, no trio child)
            [sys.executable, "-c", hog_code], stdout=subprocess.PIPE
        )
        try:
            assert hog.stdout is not None
            await trio.to_thread.run_sync(hog.stdout.readline)
            await until(lambda: stopped(new_marker))
            assert stopped(old_marker) is False
        finally:
            hog.kill()
            hog.wait()
            if hog.stdout is not None:
                hog.stdout.close()
        stop_new.touch()
        stop_old.touch()
        done_new = await finish(scheduler, new.name)
        done_old = await finish(scheduler, old.name)
        memory = worker.statistics().memory
    assert done_old.result is not None and done_old.result.exit_code == 0
    assert done_new.result is not None and done_new.result.exit_code == 0, done_new.error
    assert memory is not None and memory.frozen >= 1 and memory.frozen_now == 0


async def test_a_cancelled_frozen_action_ends_without_waiting_for_the_kill_grace(
    tmp_path: Path, store: MemoryStore
) -> None:
    """A frozen process acts on no SIGTERM (one frozen by a cgroup not even on
    SIGKILL until thawed): with a 300 s kill grace, the cancelled frozen
    action must still be gone within the poll's 20 s."""
    available = [16 * GiB]
    pressure = PressureMonitor(2 * GiB, available=lambda: available[0], pressure=lambda: None)
    async with running(store, tmp_path, governed(), pressure, kill_grace_s=300.0) as (
        scheduler,
        worker,
    ):
        started = await start_old_and_new(scheduler, worker, store, tmp_path, 400)
        available[0] = int(1.5 * GiB)
        await until(lambda: stopped(started.new_marker))
        scheduler.cancel(started.new.name)
        await until(lambda: not processes_of(started.new_marker))
        assert stopped(started.old_marker) is False
        available[0] = 16 * GiB
        started.stop_old.touch()
        done_old = await finish(scheduler, started.old.name)
    assert done_old.result is not None and done_old.result.exit_code == 0


def test_the_v1_freezer_is_what_freezes_here_as_root() -> None:
    """This machine mounts the v1 freezer read-write; as root lre must use it
    (elsewhere SIGSTOP is the path, and this says why)."""
    from lre.worker.memory._freezer import cgroup_freezer

    freezer = cgroup_freezer()
    import os

    if os.geteuid() == 0 and Path("/sys/fs/cgroup/freezer/tasks").exists():
        assert freezer.available, freezer.why_not
    else:
        assert not freezer.available and freezer.why_not
