"""Firehose: 2,000 distinct multi-process CPU burners submitted at once (issue 6, bench 1).

Needs the whole stack (Execute wired in the composition root). Starts
``python -m lre up`` twice with generated configs (bench/_client.py):

- bounded: lre's defaults (max_inflight_tasks auto = CPU count, jobserver on,
  memory budget auto);
- unbounded: max_inflight_tasks 0, no jobserver, memory_budget 0 (NativeLink's
  defaults).

Each action is ``make -f -`` reading a makefile with 4 targets that each burn
~``--cpu``/4 CPU-seconds in a shell loop; the Command sets ``MAKEFLAGS=-j4``,
which lre replaces with the action's jobserver pool (bounded) and keeps
otherwise (unbounded), so an unbounded action runs 4 busy processes.

Reported per mode: wall time vs ideal (total CPU / cores; CPU per action is
calibrated by running the burner locally), peak number of processes under lre
(a separate monitor process, every 100 ms), p99 lateness of a separate process
sleeping 10 ms in a loop, failures. Targets: wall <= 1.10 x ideal, peak
processes <= 2 x cores + jobserver tokens, p99 lateness <= 20 ms.

Run: ``.venv/bin/python bench/bench_firehose.py [--actions 2000] [--cpu 0.2]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _client import LreProcess, Monitor, ReapiClient, local_config

ENV_PATH = "/usr/local/bin:/usr/bin:/bin"


def burner_script(loops: int, tag: int) -> str:
    recipe = f"@i=0; while [ $$i -lt {loops} ]; do i=$$((i+1)); done"
    makefile = "all: t1 t2 t3 t4\\nt1 t2 t3 t4:\\n\\t" + recipe + "\\n.PHONY: all t1 t2 t3 t4\\n"
    # the tag makes every action distinct (no dedup, no cache hit)
    return f"printf '{makefile}' | make -s -f - # action {tag}"


def cpu_of(script: str, env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["sh", "-c", script], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def calibrate(target_cpu: float) -> tuple[int, float]:
    """Loop count giving ~target_cpu CPU-seconds per action, and the measured CPU."""
    env = {"PATH": ENV_PATH, "MAKEFLAGS": "-j4"}
    loops = 20000
    cpu = cpu_of(burner_script(loops, -1), env)
    loops = max(1000, int(loops * target_cpu / max(cpu, 1e-3)))
    samples = sorted(cpu_of(burner_script(loops, -1), env) for _ in range(5))
    return loops, samples[2]


async def fire(address: str, actions: int, loops: int) -> tuple[int, float]:
    client = ReapiClient(address)
    try:
        env = {"PATH": ENV_PATH, "MAKEFLAGS": "-j4"}
        digests = await asyncio.gather(
            *(
                client.prepare(["sh", "-c", burner_script(loops, i)], env=env)
                for i in range(actions)
            )
        )
        started = time.monotonic()
        responses = await asyncio.gather(
            *(client.execute(d) for d in digests), return_exceptions=True
        )
        wall = time.monotonic() - started
    finally:
        await client.close()
    failed = sum(
        1
        for r in responses
        if isinstance(r, BaseException) or r.status.code != 0 or r.result.exit_code != 0
    )
    return failed, wall


def run_mode(
    tmp: Path,
    label: str,
    worker: dict[str, object],
    args: argparse.Namespace,
    loops: int,
    ideal: float,
) -> None:
    home = tmp / label
    with LreProcess(local_config(home, worker), home) as lre:
        tree = Monitor("tree", str(lre.proc.pid), "0.1", out=home / "tree.json")
        sleeper = Monitor("sleeper", out=home / "sleeper.json")
        try:
            failed, wall = asyncio.run(fire(lre.address, args.actions, loops))
        finally:
            late = sleeper.stop()
            seen = tree.stop()
    print(
        f"{label:<10}{wall:>9.1f}{wall / ideal:>9.2f}x{seen['peak_processes']:>10.0f}"
        f"{late['p99_late_s'] * 1e3:>12.1f}{failed:>8}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=2000)
    parser.add_argument("--cpu", type=float, default=0.2, help="CPU-seconds per action")
    parser.add_argument("--no-unbounded", action="store_true")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    loops, cpu = calibrate(args.cpu)
    ideal = args.actions * cpu / cores
    print(f"cores={cores} actions={args.actions} cpu/action={cpu:.3f}s ideal wall={ideal:.1f}s")
    print(
        f"{'mode':<10}{'wall s':>9}{'vs ideal':>10}{'peak procs':>10}{'p99 late ms':>12}"
        f"{'failed':>8}"
    )
    with tempfile.TemporaryDirectory(prefix="lre-bench-firehose-") as d:
        tmp = Path(d)
        run_mode(tmp, "bounded", {}, args, loops, ideal)
        if not args.no_unbounded:
            unbounded = {
                "max_inflight_tasks": 0,
                "jobserver": {"enabled": False},
                "resources": {"memory_budget": 0, "live_memory_veto": False},
            }
            run_mode(tmp, "unbounded", unbounded, args, loops, ideal)
    print(f"targets: wall <= 1.10x ideal, peak procs <= {2 * cores} + tokens, p99 late <= 20 ms")


if __name__ == "__main__":
    main()
