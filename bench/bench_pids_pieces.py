"""The pieces of the per-action pids cgroup, one by one, in a spawner-like thread.

What ``workers[].local.max_processes`` puts on the spawn path where lre owns
pids cgroups (``lre/worker/_process_limit.py``): reads of ``pids.current``
and ``pids.events``, the spawner thread's migration (writing ``0`` to
``tasks``), each done as a path open + access + close and as one
``pread``/``pwrite`` on a descriptor kept open, and a ``Popen`` + wait of
``/bin/true`` with the thread in lre's own cgroup and in a pids cgroup. Each
piece runs ``--runs`` times per round for ``--rounds`` rounds, timed with
``time.thread_time_ns`` (the thread's CPU, not wall time); it prints the
medians in microseconds. Needs root with a writable cgroup v1 ``pids``
hierarchy (exits 1 saying why otherwise); makes two cgroups under
``/sys/fs/cgroup/pids/bench-pids-{pid}`` and removes them.

A quiet process measures warm caches: in the busy server the same calls cost
5-10 times more (see docs/resource-control.md, "Processes per action").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

ROOT = "/sys/fs/cgroup/pids"


def _read_path(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 256)
    finally:
        os.close(fd)


def _write_path(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class _Pieces:
    """The two cgroups, their kept descriptors and the timings."""

    def __init__(self, base: str) -> None:
        self.groups = [f"{base}/g0", f"{base}/g1"]
        for group in self.groups:
            os.mkdir(group)
            _write_path(f"{group}/pids.max", b"4097")
        self.current = os.open(f"{self.groups[0]}/pids.current", os.O_RDONLY | os.O_CLOEXEC)
        self.events = os.open(f"{self.groups[0]}/pids.events", os.O_RDONLY | os.O_CLOEXEC)
        self.tasks = [os.open(f"{g}/tasks", os.O_WRONLY | os.O_CLOEXEC) for g in self.groups]
        self.home = os.open(f"{ROOT}/tasks", os.O_WRONLY | os.O_CLOEXEC)
        self.at = 0
        self.times: dict[str, list[int]] = {}

    def time(self, name: str, piece: Callable[[], object], runs: int) -> None:
        out = self.times.setdefault(name, [])
        for _ in range(runs):
            start = time.thread_time_ns()
            piece()
            out.append(time.thread_time_ns() - start)

    def migrate_by_path(self) -> None:
        self.at ^= 1
        _write_path(f"{self.groups[self.at]}/tasks", b"0")

    def migrate_kept(self) -> None:
        self.at ^= 1
        os.pwrite(self.tasks[self.at], b"0", 0)

    def round(self, runs: int, spawns: int) -> None:
        current = f"{self.groups[0]}/pids.current"
        events = f"{self.groups[0]}/pids.events"
        self.time("pids.current: open + read + close", lambda: _read_path(current), runs)
        kept_current = self.current
        self.time("pids.current: pread, kept fd", lambda: os.pread(kept_current, 32, 0), runs)
        self.time("pids.events: open + read + close", lambda: _read_path(events), runs)
        kept_events = self.events
        self.time("pids.events: pread, kept fd", lambda: os.pread(kept_events, 256, 0), runs)
        self.time("migration by 0: open + write + close", self.migrate_by_path, runs)
        self.time("migration by 0: pwrite, kept fd", self.migrate_kept, runs)

        def spawn() -> None:
            subprocess.Popen(["/bin/true"], close_fds=True).wait()

        os.pwrite(self.home, b"0", 0)
        self.time("Popen + wait /bin/true, thread at home", spawn, spawns)
        os.pwrite(self.tasks[0], b"0", 0)
        self.time("Popen + wait /bin/true, thread in a pids cgroup", spawn, spawns)
        os.pwrite(self.home, b"0", 0)

    def close(self) -> None:
        os.pwrite(self.home, b"0", 0)
        for fd in (self.current, self.events, self.home, *self.tasks):
            os.close(fd)
        for group in self.groups:
            os.rmdir(group)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=400, help="runs of each file access per round")
    ap.add_argument("--spawns", type=int, default=150, help="spawns per round and placement")
    args = ap.parse_args()
    if not os.access(f"{ROOT}/tasks", os.W_OK):
        print(f"no writable cgroup v1 pids hierarchy at {ROOT}")
        return 1
    base = f"{ROOT}/bench-pids-{os.getpid()}"
    os.mkdir(base)
    failures: list[BaseException] = []
    pieces: list[_Pieces] = []

    def spawner() -> None:
        try:
            pieces.append(_Pieces(base))
            try:
                for _ in range(args.rounds):
                    pieces[0].round(args.runs, args.spawns)
            finally:
                pieces[0].close()
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=spawner, name="lre-spawner-bench")
    thread.start()
    thread.join()
    os.rmdir(base)
    if failures:
        raise failures[0]
    print(f"load {os.getloadavg()[0]:.1f}; medians of the thread's CPU per call")
    for name, values in pieces[0].times.items():
        print(f"  {name:50s} {statistics.median(values) / 1000:7.1f} us  ({len(values)} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
