"""What the per-action pids cgroup costs the spawner thread, in seconds.

Runs lre's own ``ProcessLimits`` (``lre/worker/_process_limit.py``, taken
from ``--tree`` through ``sys.path``) the way a spawner thread does: one
thread forks ``/bin/sleep`` inside ``around_fork``, keeps ``--inflight``
actions running (so the thread's last cgroup is busy and most spawns migrate
it, as under a build), and ends the oldest (``ended``) before each new
spawn. Per spawn it reports the spawner thread's CPU and wall time, with the
limit on (``--limit``) and off (0) in alternating rounds, and how many
spawns moved the thread. Needs root with a writable cgroup v1 ``pids``
hierarchy (else it says why and exits 1).

Compare two trees (e.g. the base and a branch) by running it once per tree;
the figures are per spawn of the thread only (fork + exec of the child are
in both modes alike).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path


def _round(limits: object, limit: int, spawns: int, inflight: int) -> tuple[float, float, int]:
    """(CPU s, wall s, migrations) per spawn in one spawner thread."""
    out: list[tuple[float, float, int]] = []

    def spawner() -> None:
        running: deque[subprocess.Popen[bytes]] = deque()
        moves = 0
        cpu = wall = 0.0
        for _ in range(spawns):
            if len(running) >= inflight:
                old = running.popleft()
                old.kill()
                old.wait()
                limits.ended(old.pid)  # type: ignore[attr-defined]
            before = limits._local.__dict__.get("sitting")  # type: ignore[attr-defined]
            c0, w0 = time.thread_time(), time.perf_counter()
            with limits.around_fork(limit):  # type: ignore[attr-defined]
                popen = subprocess.Popen(["/bin/sleep", "30"], close_fds=True)
            limits.started(popen.pid)  # type: ignore[attr-defined]
            cpu += time.thread_time() - c0
            wall += time.perf_counter() - w0
            moves += limits._local.__dict__.get("sitting") is not before  # type: ignore[attr-defined]
            running.append(popen)
        for old in running:
            old.kill()
            old.wait()
            limits.ended(old.pid)  # type: ignore[attr-defined]
        out.append((cpu / spawns, wall / spawns, moves))

    thread = threading.Thread(target=spawner, name="lre-spawner-bench")
    thread.start()
    thread.join()
    return out[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--spawns", type=int, default=200, help="spawns per round")
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--limit", type=int, default=4096)
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    from lre.worker._process_limit import ProcessLimits

    limits = ProcessLimits()
    if not limits.enforced_by_cgroup:
        print(f"no pids cgroup here: {limits.why_not}")
        return 1
    figures: dict[int, list[tuple[float, float, int]]] = {0: [], args.limit: []}
    try:
        for number in range(args.rounds):
            for limit in (0, args.limit) if number % 2 == 0 else (args.limit, 0):
                figures[limit].append(_round(limits, limit, args.spawns, args.inflight))
    finally:
        limits.close()
    print(f"tree {args.tree}, {args.spawns} spawns x {args.rounds} rounds, {args.inflight} running")
    for limit, rows in figures.items():
        cpu = statistics.median(r[0] for r in rows) * 1e6
        wall = statistics.median(r[1] for r in rows) * 1e6
        moves = statistics.median(r[2] for r in rows) / args.spawns
        print(
            f"max_processes {limit}: spawner thread {cpu:.0f} us CPU, {wall:.0f} us wall "
            f"per spawn (medians); {moves:.0%} of spawns moved the thread"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
