"""A real memory stall from a real process outside lre wakes the memory control.

The stall is made safely: a few ``cat`` loops in a memory cgroup of their own
(cgroup v1 ``memory``, limit ``LIMIT``) read a file several times that size,
so the kernel reclaims and refaults their page cache all the time. That is a
memory stall PSI counts system-wide (``/proc/pressure/memory``), while the
cgroup caps what they hold at ``LIMIT``: the machine's memory and its OOM
killer are never involved (page cache is reclaimable; the loops hold ~1 MiB
of their own each). A busy machine makes the stall longer, not shorter.

Needs PSI and a writable memory cgroup (root, as CI runs); elsewhere it
skips naming what is missing. The kernel decides when the event comes (the
2 s window for a caller without CAP_SYS_RESOURCE), so the deadline is long;
the control's own timer is an hour, so only the kernel's event can wake it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from lre.worker.memory._psi_trigger import PSI_MEMORY, PsiTrigger
from lre.worker.usage._sampler import ProcessTreeSampler
from tests._support.lre_as import python_for

from .test_psi_trigger import (
    control,
    expected_spec,
    has_cap_sys_resource,
    require_psi,
    sleeping_process,
    trigger_threads,
)

MiB = 1 << 20
MEMORY_V1 = Path("/sys/fs/cgroup/memory")
#: What the stalling processes may hold, page cache included.
LIMIT = 32 * MiB
#: The file they read over and over: 4 x LIMIT.
FILE_SIZE = 128 * MiB
READERS = 3


def cold_file(path: Path) -> Path:
    """A FILE_SIZE file on disk whose pages are not in the page cache (so the
    readers' cgroup is charged for them as they read)."""
    block = os.urandom(MiB)
    with path.open("wb") as out:
        for _ in range(FILE_SIZE // MiB):
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
        os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return path


@contextlib.contextmanager
def memory_cgroup(name: str) -> Iterator[Path]:
    """A v1 memory cgroup limited to LIMIT; skips where none can be made."""
    if not (MEMORY_V1 / "memory.limit_in_bytes").exists():
        pytest.skip(f"no cgroup v1 memory controller at {MEMORY_V1}")
    group = MEMORY_V1 / name
    try:
        group.mkdir()
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup at {group}: {error.strerror}")
    try:
        (group / "memory.limit_in_bytes").write_text(str(LIMIT))
        yield group
    finally:
        deadline = time.monotonic() + 30
        while True:
            try:
                group.rmdir()
                break
            except OSError:  # its last processes are still being reaped
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


@contextlib.contextmanager
def stalling_readers(group: Path, file: Path) -> Iterator[list[int]]:
    """READERS shell loops in ``group`` that read ``file`` over and over;
    killed (their whole process group) on exit."""
    loop = f'echo $$ > {group}/cgroup.procs && while :; do cat "$1" > /dev/null; done'
    readers = [
        subprocess.Popen(["sh", "-c", loop, "reader", str(file)], start_new_session=True)
        for _ in range(READERS)
    ]
    try:
        yield [r.pid for r in readers]
    finally:
        for reader in readers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(reader.pid, signal.SIGKILL)
            reader.wait()


def stall_microseconds() -> int:
    """The kernel's running total of "some" memory stall."""
    some = Path(PSI_MEMORY).read_text().splitlines()[0]
    return int(some.rsplit("total=", 1)[1])


async def test_a_real_stall_from_an_outside_process_wakes_the_memory_control(
    tmp_path: Path,
) -> None:
    require_psi()
    hour = 3600.0
    sampler = ProcessTreeSampler(hour)
    reads: list[int] = []
    memory = control(sampler, reads, hour, clock=lambda: 0.0)
    sampler.on_pass = memory.after_pass
    trigger = PsiTrigger(memory.pressure_event)  # the real /proc/pressure/memory
    memory.trigger = trigger
    file = cold_file(tmp_path / "pages.bin")
    with (
        memory_cgroup(f"lre-test-stall-{os.getpid()}") as group,
        sleeping_process() as pid,
    ):
        sampler.register("a", pid)
        memory.started("a", pid, 1 * MiB)
        async with trio.open_nursery() as nursery:
            await nursery.start(sampler.run)  # passes once now, then in an hour
            await nursery.start(trigger.run)
            if expected_spec(has_cap_sys_resource()) is None:
                pytest.skip(f"this kernel takes no PSI trigger from this user: {trigger.mode}")
            assert trigger.active, trigger.mode
            with trio.fail_after(30):
                while not reads:  # noqa: ASYNC110 - the first pass, made at start
                    await trio.sleep(0.01)
            passes = sampler.statistics().passes
            stalled_before = stall_microseconds()
            with stalling_readers(group, file):
                with trio.fail_after(120):  # the timer would take an hour
                    while memory.statistics().pressure_events == 0:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                    while sampler.statistics().passes == passes:  # noqa: ASYNC110
                        await trio.sleep(0.01)
                cached = int((group / "memory.max_usage_in_bytes").read_text())
            assert trigger.events >= 1
            assert stall_microseconds() > stalled_before  # a real stall, counted by the kernel
            assert cached <= LIMIT  # the readers never held more than their cgroup's limit
            assert sampler.interval == 0.05  # sampling fast after the event
            nursery.cancel_scope.cancel()
    assert not trigger_threads()


#: Registers the trigger as it runs (as ``nobody`` here), says so, then waits
#: for the kernel's event and prints how long it took (or "none").
WAITER = """
import select, sys, time
from lre.worker.memory._psi_trigger import register_trigger
source = register_trigger()
print(source.describe, flush=True)
sys.stdin.readline()  # the readers have started
start = time.monotonic()
poll = select.poll()
poll.register(source.fd, source.events)
events = poll.poll(120_000)
print("event" if events else "none", round(time.monotonic() - start, 2), flush=True)
"""


def test_a_real_stall_reaches_a_trigger_registered_as_nobody(tmp_path: Path) -> None:
    """lre runs unprivileged on a laptop: the kernel must deliver the event to
    a trigger that a user without CAP_SYS_RESOURCE registered (the 2 s window)."""
    require_psi()
    if expected_spec(False) is None:
        pytest.skip("this kernel takes PSI triggers only with CAP_SYS_RESOURCE")
    prefix, env = python_for("nobody")
    file = cold_file(tmp_path / "pages.bin")
    with (
        memory_cgroup(f"lre-test-stall-nobody-{os.getpid()}") as group,
        subprocess.Popen(
            [*prefix, "-c", WAITER],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as waiter,
    ):
        try:
            assert waiter.stdin is not None and waiter.stdout is not None
            registered = waiter.stdout.readline()
            assert registered.startswith("psi trigger: some 100000 2000000"), registered
            with stalling_readers(group, file):
                waiter.stdin.write("go\n")
                waiter.stdin.flush()
                answer = waiter.stdout.readline().split()
            assert answer and answer[0] == "event", answer
        finally:
            waiter.kill()
