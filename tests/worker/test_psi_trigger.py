"""The PSI trigger that wakes the memory control (lre/worker/memory/_psi_trigger.py).

Registration is tried against this kernel's real ``/proc/pressure/memory``,
as lre's own user and as ``nobody``; what the kernel must accept is worked out
from its version and the caller's CAP_SYS_RESOURCE. A real stall event cannot
be provoked reliably on a shared machine with free memory, so the wake-up is
shown with an eventfd fed into the same poll loop: the sampler's timer is an
hour, so only the event can make the pass the test waits for.
"""

from __future__ import annotations

import json
import os
import platform
import select
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from lre.cas import MemoryStore
from lre.worker import LocalWorker
from lre.worker.containment._containment import choose_containment
from lre.worker.memory._governor import GovernorLimits, MemoryGovernor
from lre.worker.memory._memory_control import ControlPace, MemoryControl
from lre.worker.memory._pressure import PressureMonitor
from lre.worker.memory._psi_trigger import (
    PSI_MEMORY,
    TRIGGER_SPECS,
    PsiTrigger,
    TriggerSource,
    TriggerUnavailable,
    register_trigger,
)
from lre.worker.usage._sampler import ProcessTreeSampler
from tests._support.ci import in_ci
from tests._support.lre_as import python_for

from .test_memory_control import governed, running

MiB = 1 << 20
CAP_SYS_RESOURCE = 24
THREAD_NAME = "lre psi trigger"


def require_psi() -> None:
    """Fail (in CI) or skip where this kernel has no PSI file."""
    if not os.path.exists(PSI_MEMORY):
        if in_ci():
            pytest.fail(f"{PSI_MEMORY} is missing: CI's kernel must have PSI")
        pytest.skip(f"{PSI_MEMORY} is missing (kernel without PSI)")


def kernel_at_least(major: int, minor: int) -> bool:
    parts = platform.release().split(".")
    return (int(parts[0]), int(parts[1].split("-")[0])) >= (major, minor)


def has_cap_sys_resource() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    return False


def expected_spec(privileged: bool) -> str | None:
    """The line this kernel accepts from a caller (None: none). Linux 6.5+
    lets anyone register a window that is a multiple of 2 s; a shorter one,
    and before 6.5 any trigger, needs CAP_SYS_RESOURCE."""
    if privileged:
        return TRIGGER_SPECS[0]
    return TRIGGER_SPECS[1] if kernel_at_least(6, 5) else None


def psi_fds() -> int:
    """This process's open file descriptors on the PSI file."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == PSI_MEMORY:
                count += 1
        except OSError:
            pass
    return count


def trigger_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


# ---------------------------------------------------------------------- registration

#: Registers against the real file and says which line was taken and whether
#: the kernel then holds a trigger on the fd (a second line is refused: EBUSY).
PROBE = """
import json, os
from lre.worker.memory._psi_trigger import TriggerUnavailable, register_trigger
try:
    source = register_trigger()
except TriggerUnavailable as error:
    print(json.dumps({"error": str(error)}))
else:
    try:
        os.write(source.fd, b"some 100000 2000000\\0")
        busy = False
    except OSError as error:
        busy = error.strerror
    print(json.dumps({"mode": source.describe, "busy": busy}))
    source.close()
"""


def probe_as(identity: str) -> dict[str, object]:
    prefix, env = python_for(identity)
    done = subprocess.run(
        [*prefix, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def check_registration(answer: dict[str, object], spec: str | None) -> None:
    if spec is None:
        assert "refused" in str(answer["error"]) or "cannot open" in str(answer["error"])
        return
    assert answer["mode"] == f"psi trigger: {spec} ({PSI_MEMORY})", answer
    # the kernel really holds the trigger: it takes no second one on this fd
    assert answer["busy"] == os.strerror(16), answer


def test_the_trigger_registers_on_the_real_file_as_lres_own_user() -> None:
    require_psi()
    check_registration(probe_as("own"), expected_spec(has_cap_sys_resource()))


def test_the_trigger_registers_on_the_real_file_as_nobody_where_the_kernel_allows() -> None:
    require_psi()
    # nobody holds no capability: the 2 s window on 6.5+, nothing before
    check_registration(probe_as("nobody"), expected_spec(False))


def test_a_refused_trigger_line_is_a_fallback_that_leaves_nothing_open() -> None:
    before = set(os.listdir("/proc/self/fd"))
    # /dev/full opens for writing and refuses every write (ENOSPC)
    with pytest.raises(TriggerUnavailable, match="refused every trigger"):
        register_trigger("/dev/full")
    assert set(os.listdir("/proc/self/fd")) <= before


def test_a_missing_file_is_a_fallback_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(TriggerUnavailable, match="does not exist"):
        register_trigger(str(tmp_path / "pressure-memory"))


# ---------------------------------------------------------------------- the wake-up


@contextmanager
def sleeping_process() -> Iterator[int]:
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def eventfd_source(fds: list[int]) -> Callable[[], TriggerSource]:
    """An ``open_source`` giving an eventfd (its fd is appended to ``fds``)
    the test writes to stand for a kernel stall event."""

    def open_source() -> TriggerSource:
        fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        fds.append(fd)
        return TriggerSource(fd, select.POLLIN, "psi trigger: eventfd standing for the kernel")

    return open_source


def control(
    sampler: ProcessTreeSampler,
    reads: list[int],
    normal_interval: float,
    clock: Callable[[], float] = time.monotonic,
) -> MemoryControl:
    def available() -> int:
        reads.append(1)
        return 64 << 30  # plenty: the control decides nothing

    monitor = PressureMonitor(2 << 30, available=available, pressure=lambda: 0.0, cache_s=0.0)
    return MemoryControl(
        MemoryGovernor(GovernorLimits(headroom_bytes=2 << 30, floor_bytes=1 << 30)),
        monitor,
        sampler,
        choose_containment("portable"),
        kill=lambda *_: None,
        pace=ControlPace(normal_interval, 0.05, clock),
    )


async def test_a_stall_event_wakes_the_memory_control_long_before_its_timer() -> None:
    hour = 3600.0
    sampler = ProcessTreeSampler(hour)
    reads: list[int] = []
    # the control's clock stands still: the fast period after the event
    # lasts, whatever the machine's load
    memory = control(sampler, reads, hour, clock=lambda: 0.0)
    sampler.on_pass = memory.after_pass
    fds: list[int] = []
    trigger = PsiTrigger(memory.pressure_event, open_source=eventfd_source(fds))
    memory.trigger = trigger
    with sleeping_process() as pid:
        sampler.register("a", pid)
        memory.started("a", pid, 1 * MiB)
        async with trio.open_nursery() as nursery:
            await nursery.start(sampler.run)  # passes once now, then in an hour
            await nursery.start(trigger.run)
            assert memory.statistics().sampling.startswith("psi trigger: eventfd")
            with trio.fail_after(30):
                while not reads:  # noqa: ASYNC110 - the first pass, made at start
                    await trio.sleep(0.01)
            passes = sampler.statistics().passes
            os.eventfd_write(fds[0], 1)
            with trio.fail_after(30):  # the timer would take an hour
                while sampler.statistics().passes == passes:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            assert len(reads) >= 2  # the control read the host after the woken pass
            assert memory.statistics().pressure_events == 1
            # and samples fast for a while after the event
            assert sampler.interval == 0.05
            nursery.cancel_scope.cancel()
    assert not trigger_threads()
    with pytest.raises(OSError):
        os.fstat(fds[0])  # closed with the trigger


async def test_a_trigger_the_kernel_drops_falls_back_to_the_timer() -> None:
    read_end, write_end = os.pipe()
    trigger = PsiTrigger(
        lambda: None,
        open_source=lambda: TriggerSource(read_end, select.POLLIN, "psi trigger: a pipe"),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(trigger.run)
        assert trigger.active
        os.close(write_end)  # POLLHUP, as POLLERR when the kernel drops a trigger
        with trio.fail_after(30):
            while trigger.active:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert trigger.mode.startswith("timer: psi trigger failed")
        nursery.cancel_scope.cancel()
    assert not trigger_threads()


async def test_without_the_file_the_control_samples_on_its_timer(tmp_path: Path) -> None:
    sampler = ProcessTreeSampler(0.05)
    reads: list[int] = []
    memory = control(sampler, reads, 0.05)
    sampler.on_pass = memory.after_pass
    missing = str(tmp_path / "no-psi")
    trigger = PsiTrigger(memory.pressure_event, open_source=lambda: register_trigger(missing))
    memory.trigger = trigger
    with sleeping_process() as pid:
        sampler.register("a", pid)
        memory.started("a", pid, 1 * MiB)
        async with trio.open_nursery() as nursery:
            await nursery.start(trigger.run)
            await nursery.start(sampler.run)
            sampling = memory.statistics().sampling
            assert sampling.startswith("timer: ") and missing in sampling, sampling
            assert not trigger_threads()
            with trio.fail_after(30):
                while len(reads) < 3:  # noqa: ASYNC110 - passes keep coming on the timer
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------- in the worker


async def test_the_worker_runs_the_trigger_and_leaves_no_thread_or_fd(
    store: MemoryStore, tmp_path: Path
) -> None:
    require_psi()
    spec = expected_spec(has_cap_sys_resource())
    fds_before = psi_fds()
    worker: LocalWorker
    async with running(store, tmp_path, governed(), None) as (_, worker):
        sampling = worker.memory.statistics().sampling
        if spec is None:
            assert sampling.startswith("timer: "), sampling
        else:
            assert sampling == f"psi trigger: {spec} ({PSI_MEMORY})"
            assert len(trigger_threads()) == 1
            assert psi_fds() == fds_before + 1
    assert not trigger_threads()
    assert psi_fds() == fds_before
    assert worker.memory.statistics().sampling.startswith("timer: ")
