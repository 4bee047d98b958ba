"""Cost of one ProcessTreeSampler pass over 64 actions of 4 processes each.

Target: a pass costs < 5% of one core at a 250 ms interval, i.e.
< 12.5 ms. Spawns ``--actions`` sessions, each a shell with three ``sleep``
children (4 processes), registers them, times ``--passes`` passes and prints
the median, the maximum and the share of the interval. The first pass (empty
foreign-process cache) is reported on its own line.

Run: ``.venv/bin/python bench/bench_sampler.py [--actions 64] [--passes 20]``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import time

from lre.worker.usage._sampler import ProcessTreeSampler


def spawn(actions: int) -> list[subprocess.Popen[bytes]]:
    procs = []
    for _ in range(actions):
        procs.append(
            subprocess.Popen(
                ["sh", "-c", "sleep 600 & sleep 600 & sleep 600 & wait"],
                start_new_session=True,
            )
        )
    return procs


def wait_for_tree(sampler: ProcessTreeSampler, expected: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sampler.sample_once()
        if sum(u.processes for u in sampler.snapshots()) >= expected:
            return
        time.sleep(0.05)
    raise SystemExit(f"process trees did not appear within {timeout}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=64)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.25)
    args = parser.parse_args()
    if args.passes < 5:
        parser.error("--passes must be >= 5 (the median of at least 5 is reported)")

    procs = spawn(args.actions)
    try:
        sampler = ProcessTreeSampler(args.interval)
        cold = ProcessTreeSampler(args.interval)
        for i, p in enumerate(procs):
            sampler.register(f"a{i}", p.pid)
            cold.register(f"a{i}", p.pid)
        wait_for_tree(sampler, 4 * args.actions)
        first = cold.sample_once()
        times = [sampler.sample_once() for _ in range(args.passes)]
        sampled = sampler.statistics().last_pass_processes
        host = sum(1 for n in os.listdir("/proc") if n.isdigit())
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()

    median = statistics.median(times)
    share = median / args.interval * 100
    print(f"actions={args.actions} sampled processes={sampled} host processes={host}")
    print(f"{'pass':<28}{'ms':>10}{'% of interval':>16}")

    def row(label: str, seconds: float) -> None:
        print(f"{label:<28}{seconds * 1e3:>10.2f}{seconds / args.interval * 100:>15.1f}%")

    row("first (cold foreign cache)", first)
    row(f"median of {args.passes}", median)
    row("max", max(times))
    verdict = "PASS" if share < 5.0 else "FAIL"
    print(f"target < 5% of one core at {args.interval * 1e3:.0f} ms: {verdict}")


if __name__ == "__main__":
    main()
