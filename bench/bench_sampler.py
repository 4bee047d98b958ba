"""What the sampler's pass costs, and why it reads what it reads.

Default: one ``ProcessTreeSampler`` pass over ``--actions`` (64) actions of 4
processes each (a shell with three ``sleep`` children), timed ``--passes``
times: the median, the maximum and the share of the 250 ms interval (target
< 5 % of one core, i.e. < 12.5 ms). The first pass (empty foreign-process
cache) is reported on its own line.

``--figures``: the memory figures it could read per process, on ``--small``
(1,992) processes keeping a few MiB each plus ``--large`` (8) keeping
``--large-mib`` (512) MiB of anonymous memory:

- ``stat``: resident pages from ``/proc/<pid>/stat`` (field 24), ``pread`` on a
  descriptor kept open between passes, as the sampler does;
- ``statm``: the same through ``/proc/<pid>/statm``, also kept open;
- ``smaps_rollup``: ``Pss:``, opened and read each pass (the kernel walks the
  page tables on every read, so the cost grows with resident memory).

Run: ``.venv/bin/python bench/bench_sampler.py [--figures]``. Exits with a
message if the process trees do not appear within 10 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from lre.worker.usage._sampler import ProcessTreeSampler

_LARGE = (
    "import sys, time\n"
    "block = bytearray(int(sys.argv[1]) << 20)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)

Procs = list[subprocess.Popen[bytes]]


def spawn(script: str, sessions: int, procs: Procs) -> None:
    """``sessions`` shells running ``script``, each its own session."""
    for _ in range(sessions):
        procs.append(subprocess.Popen(["sh", "-c", script], start_new_session=True))


def spawn_large(count: int, mib: int, procs: Procs) -> None:
    for _ in range(count):
        proc = subprocess.Popen(
            [sys.executable, "-c", _LARGE, str(mib)], stdout=subprocess.PIPE, start_new_session=True
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        procs.append(proc)


def kill_all(procs: Procs) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()


def timed(passes: int, one_pass: Callable[[], object]) -> list[float]:
    out = []
    for _ in range(passes):
        started = time.perf_counter()
        one_pass()
        out.append(time.perf_counter() - started)
    return out


def show(label: str, times: Sequence[float], interval: float) -> None:
    median = statistics.median(times)
    print(
        f"{label:32s} median {median * 1e3:7.2f} ms  max {max(times) * 1e3:7.2f} ms  "
        f"{median / interval:6.1%} of the interval"
    )


def sampler_pass(args: argparse.Namespace, procs: Procs) -> None:
    spawn("sleep 600 & sleep 600 & sleep 600 & wait", args.actions, procs)
    sampler = ProcessTreeSampler(args.interval)
    cold = ProcessTreeSampler(args.interval)
    for i, p in enumerate(procs):
        sampler.register(f"a{i}", p.pid)
        cold.register(f"a{i}", p.pid)
    deadline = time.monotonic() + 10
    while sum(u.processes for u in sampler.snapshots()) < 4 * args.actions:
        if time.monotonic() > deadline:
            raise SystemExit("process trees did not appear within 10 s")
        sampler.sample_once()
        time.sleep(0.05)
    first = cold.sample_once()
    times = [sampler.sample_once() for _ in range(args.passes)]
    host = sum(1 for n in os.listdir("/proc") if n.isdigit())
    sampled = sampler.statistics().last_pass_processes
    print(f"actions={args.actions} sampled processes={sampled} host processes={host}")
    show("first (cold foreign cache)", [first], args.interval)
    show(f"{args.passes} passes", times, args.interval)
    verdict = "PASS" if statistics.median(times) / args.interval < 0.05 else "FAIL"
    print(f"target < 5% of one core at {args.interval * 1e3:.0f} ms: {verdict}")


def members(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """Every pid of the spawned sessions (the shells' sleeps included)."""
    sessions = {p.pid for p in procs}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.getsid(int(name)) in sessions:
                found.append(int(name))
        except OSError:
            continue
    return found


def pass_stat(fds: dict[int, int]) -> int:
    total = 0
    for fd in fds.values():
        data = os.pread(fd, 1024, 0)
        total += int(data[data.rfind(b")") + 2 :].split(None, 22)[21])
    return total


def pass_statm(fds: dict[int, int]) -> int:
    total = 0
    for fd in fds.values():
        total += int(os.pread(fd, 256, 0).split()[1])
    return total


def pass_smaps(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        fd = os.open(f"/proc/{pid}/smaps_rollup", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        start = data.find(b"\nPss:")
        total += int(data[start + 5 : data.index(b"kB", start)])
    return total


def memory_figures(args: argparse.Namespace, procs: Procs) -> None:
    spawn("sleep 600; :", args.small // 2, procs)  # a shell and its sleep: two each
    spawn_large(args.large, args.large_mib, procs)
    time.sleep(1.0)
    pids = members(procs)
    stat_fds = {p: os.open(f"/proc/{p}/stat", os.O_RDONLY) for p in pids}
    statm_fds = {p: os.open(f"/proc/{p}/statm", os.O_RDONLY) for p in pids}
    print(f"{len(pids)} processes ({args.large} of them keep {args.large_mib} MiB each)")
    try:
        for label, one_pass in (
            ("stat (pread, kept open)", lambda: pass_stat(stat_fds)),
            ("statm (pread, kept open)", lambda: pass_statm(statm_fds)),
            ("smaps_rollup Pss (open, read)", lambda: pass_smaps(pids)),
        ):
            show(label, timed(args.passes, one_pass), args.interval)
    finally:
        for fd in (*stat_fds.values(), *statm_fds.values()):
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--figures", action="store_true", help="the per-figure comparison")
    parser.add_argument("--actions", type=int, default=64)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--small", type=int, default=1992)
    parser.add_argument("--large", type=int, default=8)
    parser.add_argument("--large-mib", type=int, default=512)
    args = parser.parse_args()
    if args.passes < 5:
        parser.error("--passes must be >= 5 (the median of at least 5 is reported)")
    procs: Procs = []
    try:
        (memory_figures if args.figures else sampler_pass)(args, procs)
    finally:
        kill_all(procs)


if __name__ == "__main__":
    main()
