"""ProcessTreeSampler against real process trees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio

from lre.worker.usage._sampler import ActionUsage, ProcessTreeSampler
from tests._support.scratch import action_python

MiB = 1 << 20

# A parent that starts ``children`` copies of itself; each process holds ``mb`` MiB
# of touched memory, optionally burns CPU for ``burn`` seconds, prints "ready", sleeps.
TREE = r"""
import os, subprocess, sys, time
mb, children, burn = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
argv = [sys.executable, "-c", "CODE = " + repr(CODE) + "\n" + CODE, str(mb), "0", str(burn)]
kids = [subprocess.Popen(argv, stdout=subprocess.PIPE) for _ in range(children)]
for k in kids:
    k.stdout.readline()
block = bytearray(mb << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
end = time.process_time() + burn
while time.process_time() < end:
    pass
print("ready", flush=True)
time.sleep(60)
"""
CODE = "CODE = " + repr(TREE) + "\n" + TREE


@contextmanager
def process_tree(mb: int, children: int, burn: float = 0.0) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CODE, str(mb), str(children), str(burn)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_one_pass_sums_the_whole_tree() -> None:
    sampler = ProcessTreeSampler()
    with process_tree(mb=40, children=2) as proc:
        sampler.register("a1", proc.pid)
        sampler.sample_once()
        usage = sampler.snapshot("a1")
        assert usage is not None
        assert usage.processes == 3
        assert usage.rss_bytes >= 3 * 40 * MiB
        assert usage.rss_bytes < 3 * 40 * MiB + 3 * 60 * MiB
        assert usage.peak_rss_bytes == usage.rss_bytes
        assert usage.samples == 1
    # once the tree is gone the current values drop, the peak stays (the killed
    # children are orphans; give the kernel a moment to finish them)
    for _ in range(100):
        sampler.sample_once()
        now = sampler.snapshot("a1")
        if now is not None and now.processes == 0:
            break
        time.sleep(0.02)
    after = sampler.unregister("a1")
    assert after is not None
    assert after.processes == 0 and after.rss_bytes == 0
    assert after.peak_rss_bytes == usage.peak_rss_bytes
    assert after.peak_processes == 3
    assert sampler.unregister("a1") is None


def test_cpu_time_and_average() -> None:
    sampler = ProcessTreeSampler()
    with process_tree(mb=1, children=1, burn=0.4) as proc:
        sampler.register("busy", proc.pid)
        sampler.sample_once()
        usage = sampler.snapshot("busy")
    assert usage is not None
    # two processes each burned ~0.4 s before "ready" (plus interpreter start-up)
    assert 0.6 <= usage.cpu_seconds <= 3.0
    assert usage.average_millicpus > 0
    assert sampler.statistics().passes == 1


def test_actions_are_kept_apart_and_unrelated_processes_ignored() -> None:
    sampler = ProcessTreeSampler()
    with process_tree(mb=30, children=0) as a, process_tree(mb=5, children=1) as b:
        sampler.register("a", a.pid)
        sampler.register("b", b.pid)
        sampler.sample_once()
        ua, ub = sampler.snapshot("a"), sampler.snapshot("b")
        assert ua is not None and ub is not None
        assert (ua.processes, ub.processes) == (1, 2)
        assert ua.rss_bytes > 30 * MiB
        assert ub.rss_bytes < ua.rss_bytes
        assert {u.action_id for u in sampler.snapshots()} == {"a", "b"}
        with pytest.raises(ValueError, match="already"):
            sampler.register("a", 1)


def test_process_seen_before_register_is_still_sampled() -> None:
    sampler = ProcessTreeSampler()
    sampler.register("other", os.getpid())  # make passes run with something registered
    with process_tree(mb=20, children=1) as proc:
        sampler.sample_once()  # the new tree is classified foreign here
        sampler.register("late", proc.pid)
        sampler.sample_once()
        usage = sampler.snapshot("late")
        assert usage is not None and usage.processes == 2


def test_process_seen_by_several_passes_before_register_is_still_sampled() -> None:
    """On a busy machine passes go on between an action's spawn and its
    registration: the processes those passes found foreign are its own."""
    sampler = ProcessTreeSampler()
    sampler.register("other", os.getpid())
    with process_tree(mb=20, children=1) as proc:
        for _ in range(4):
            sampler.sample_once()  # foreign, again and again
        sampler.register("late", proc.pid)
        sampler.sample_once()
        usage = sampler.snapshot("late")
        assert usage is not None and usage.processes == 2
        assert sorted(sampler.members("late")) == sorted(
            [proc.pid, *(int(p) for p in _children(proc.pid))]
        )


def _children(pid: int) -> list[str]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return handle.read().split()


async def test_run_task_kills_over_the_line() -> None:
    seen: list[ActionUsage] = []
    killed = trio.Event()

    def kill(usage: ActionUsage) -> None:
        seen.append(usage)
        os.killpg(usage.leader_pid, signal.SIGKILL)
        killed.set()

    sampler = ProcessTreeSampler(0.05, on_over_limit=kill)
    with process_tree(mb=60, children=0) as proc:
        async with trio.open_nursery() as nursery:
            await nursery.start(sampler.run)
            sampler.register("fat", proc.pid, kill_line_bytes=300 * MiB)
            # a pass saw it above 30 MiB and under its line (no event to wait for)
            while not _sampled_over(sampler, "fat", 30 * MiB):  # noqa: ASYNC110
                await trio.sleep(0.01)
            assert seen == []  # under the line
            sampler.set_kill_line("fat", 30 * MiB)
            with trio.fail_after(5):
                await killed.wait()
            await trio.to_thread.run_sync(proc.wait, 5)
            nursery.cancel_scope.cancel()
        assert proc.returncode == -signal.SIGKILL
    assert len(seen) == 1
    assert seen[0].rss_bytes > 30 * MiB
    assert seen[0].kill_line_bytes == 30 * MiB
    assert sampler.statistics().passes >= 2


def _sampled_over(sampler: ProcessTreeSampler, action_id: str, floor: int) -> bool:
    usage = sampler.snapshot(action_id)
    return usage is not None and usage.samples >= 1 and usage.rss_bytes > floor


def test_hook_errors_do_not_stop_the_pass() -> None:
    def broken(usage: ActionUsage) -> None:
        raise RuntimeError("boom")

    sampler = ProcessTreeSampler(on_over_limit=broken)
    with process_tree(mb=10, children=0) as proc:
        sampler.register("x", proc.pid, kill_line_bytes=1)
        sampler.sample_once()
        sampler.sample_once()
        usage = sampler.snapshot("x")
        assert usage is not None and usage.samples == 2


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="sample_interval"):
        ProcessTreeSampler(0)


def test_foreign_cache_keeps_finding_members() -> None:
    sampler = ProcessTreeSampler()
    with process_tree(mb=5, children=1) as proc:
        sampler.register("t", proc.pid)
        sampler.sample_once()  # fills the foreign cache with every other process
        started = time.perf_counter()
        for _ in range(10):
            sampler.sample_once()
        elapsed = time.perf_counter() - started
        usage = sampler.snapshot("t")
        assert usage is not None and usage.samples == 11 and usage.processes == 2
        assert sampler.statistics().last_pass_processes == 2
    assert elapsed < 1.0


@pytest.mark.parametrize("mode", ["pidns", "userns"])
async def test_setsid_processes_in_the_actions_namespace_are_sampled(
    tmp_path: object, mode: str
) -> None:
    # A daemon that left the session still counts against its action's memory
    # when the action has a PID namespace of its own.
    from pathlib import Path

    from lre.worker.process._process import SpawnRequest, run_process

    from .test_containment import backend

    containment = backend(mode)
    work = Path(str(tmp_path))
    hog = (
        "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
        "import time; time.sleep(30)"
    )
    script = f"setsid {action_python()} -c '{hog}' & sleep 1.5"
    sampler = ProcessTreeSampler(0.1)
    usage: list[ActionUsage] = []

    def started(pid: int) -> None:
        sampler.register("a", pid)

    async with trio.open_nursery() as nursery:
        await nursery.start(sampler.run)
        await run_process(
            SpawnRequest(
                ["/bin/sh", "-c", script],
                cwd=work,
                env={"PATH": "/usr/bin:/bin"},
                stdout_path=work / "o",
                stderr_path=work / "e",
                timeout=30,
                kill_grace=0.5,
                on_started=started,
                containment=containment,
            )
        )
        snapshot = sampler.unregister("a")
        assert snapshot is not None
        usage.append(snapshot)
        nursery.cancel_scope.cancel()
    assert usage[0].peak_rss_bytes > 60 * MiB, usage[0]


def test_lre_s_own_helpers_at_the_top_are_members_but_not_counted() -> None:
    """``helpers=1``: the leader (a containment's pid 1) is frozen and
    signalled with the action, but its memory is not the action's; with 2,
    its children (userns: the namespace's init) are not counted either."""
    sampler = ProcessTreeSampler()
    with process_tree(mb=60, children=2) as proc:
        sampler.register("all", proc.pid)
        sampler.sample_once()
        everything = sampler.snapshot("all")
        assert everything is not None
        sampler.unregister("all")
        sampler.register("top", proc.pid, helpers=1)
        sampler.sample_once()
        top = sampler.snapshot("top")
        assert top is not None
        assert top.processes == 3 and proc.pid in sampler.members("top")
        # the leader's 60 MiB (and its interpreter) left out, its two children's kept
        assert everything.rss_bytes - top.rss_bytes >= 60 * MiB
        assert top.rss_bytes >= 2 * 60 * MiB
        assert top.peak_memory_bytes == top.memory_bytes == top.rss_bytes
        sampler.unregister("top")
        sampler.register("two", proc.pid, helpers=2)
        sampler.sample_once()
        two = sampler.snapshot("two")
        assert two is not None and two.processes == 3
        assert two.rss_bytes == 0
