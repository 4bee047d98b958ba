"""What one sampler pass costs per memory figure, on 2,000 live processes.

The sampler reads one small file per action process every pass (250 ms by
default). This bench compares the figures it could read for each of them:

- ``stat``: resident pages from ``/proc/<pid>/stat`` (field 24), read with
  ``pread`` on a descriptor kept open between passes, as the sampler does;
- ``statm``: the same through ``/proc/<pid>/statm`` (resident and shared),
  also kept open;
- ``smaps_rollup``: proportional set size (``Pss:``) from
  ``/proc/<pid>/smaps_rollup``, opened and read each pass (the kernel walks
  the process's page tables on every read, so its cost grows with the
  process's resident memory, not only with the number of processes).

It starts ``--small`` processes that keep a few MiB each (``sh`` waiting on
``sleep``, most of them shared pages), plus ``--large`` Python processes that
each keep ``--large-mib`` MiB of anonymous memory, then times ``--passes``
passes of each method and prints the median and the largest pass, and the
median's share of the 250 ms interval.

Run (one command; about a minute on two cores):
``.venv/bin/python bench/bench_memory_figures.py``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

_LARGE = (
    "import sys, time\n"
    "block = bytearray(int(sys.argv[1]) << 20)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def spawn(small: int, large: int, large_mib: int) -> list[subprocess.Popen[bytes]]:
    procs = []
    for _ in range(small // 2):  # a shell and its sleep: two processes each
        procs.append(subprocess.Popen(["sh", "-c", "sleep 600; :"], start_new_session=True))
    for _ in range(large):
        proc = subprocess.Popen(
            [sys.executable, "-c", _LARGE, str(large_mib)],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        procs.append(proc)
    return procs


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


def timed(passes: int, one_pass: object) -> list[float]:
    out = []
    for _ in range(passes):
        started = time.perf_counter()
        one_pass()  # type: ignore[operator]
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1992)
    parser.add_argument("--large", type=int, default=8)
    parser.add_argument("--large-mib", type=int, default=512)
    parser.add_argument("--passes", type=int, default=15)
    args = parser.parse_args()
    procs = spawn(args.small, args.large, args.large_mib)
    try:
        time.sleep(1.0)
        pids = members(procs)
        stat_fds = {p: os.open(f"/proc/{p}/stat", os.O_RDONLY) for p in pids}
        statm_fds = {p: os.open(f"/proc/{p}/statm", os.O_RDONLY) for p in pids}
        print(
            f"{len(pids)} processes ({args.large} of them keep {args.large_mib} MiB each), "
            f"{args.passes} passes per method"
        )
        for name, run in (
            ("stat (pread, kept open)", lambda: pass_stat(stat_fds)),
            ("statm (pread, kept open)", lambda: pass_statm(statm_fds)),
            ("smaps_rollup Pss (open, read)", lambda: pass_smaps(pids)),
        ):
            times = timed(args.passes, run)
            median = statistics.median(times)
            print(
                f"{name:32s} median {median * 1e3:7.1f} ms  max {max(times) * 1e3:7.1f} ms  "
                f"{median / 0.25:6.1%} of a 250 ms period"
            )
        for fd in (*stat_fds.values(), *statm_fds.values()):
            os.close(fd)
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()


if __name__ == "__main__":
    main()
