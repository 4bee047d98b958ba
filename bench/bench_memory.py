"""Memory budget and memory ladder, end to end through ``lre up``.

Needs the whole stack (Execute wired in the composition root). Each part starts
its own ``python -m lre up`` with a generated config under a scratch
``LRE_HOME`` and talks REAPI to it (bench/_client.py).

1. Budget: ``memory_budget`` 2 GiB; 40 actions, each holding 300 MB for 1 s and
   asking ``memory_kb`` = 350 MiB. A monitor process sums the RSS of every
   process under lre every 50 ms: the peak must stay <= the budget, and all 40
   must succeed. Twice: with lre's other defaults ("budget+cpu": at most one
   action per CPU, so CPU slots bind first on 2 cores) and with the budget as
   the only bound ("budget": no action limit, CPU capacity 1000). Then with
   lre unbounded (max_inflight_tasks 0, no jobserver, memory_budget 0) in the
   same invocation for comparison.
2. Ladder: cold_memory 256 MiB, ladder [512 MiB, 1 GiB], max_steps 4, budget
   2 GiB. An action growing to 800 MB in 50 MB steps must succeed; the step it
   finished at (read from lre's learned-reservations database after lre stops)
   must be the first rung whose kill line (rung x 1.2) exceeds 800 MB. An
   action growing to 3 GB must fail with RESOURCE_EXHAUSTED naming its peak RSS.

Run: ``.venv/bin/python bench/bench_memory.py`` (about a minute; needs ~13 GB
free RAM for the unbounded comparison, skip it with ``--no-unbounded``).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _client import LreProcess, Monitor, ReapiClient, local_config

MiB = 1 << 20
GiB = 1 << 30
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
PY = sys.executable

HOLD = "import time; b = b'x' * ({mb} << 20); time.sleep({seconds})"
GROW = (
    "import time\n"
    "chunks = []\n"
    "for _ in range({mb} // 50):\n"
    "    chunks.append(b'x' * (50 << 20)); time.sleep(0.05)\n"
    "time.sleep(0.5)\n"
)


async def budget_case(address: str, actions: int) -> tuple[int, float]:
    client = ReapiClient(address)
    try:
        digests = [
            await client.prepare(
                [PY, "-c", HOLD.format(mb=300, seconds=1), str(i)],
                env=ENV,
                platform={"memory_kb": str(350 * 1024)},
            )
            for i in range(actions)
        ]
        started = time.monotonic()
        responses = await asyncio.gather(*(client.execute(d) for d in digests))
        wall = time.monotonic() - started
    finally:
        await client.close()
    ok = sum(1 for r in responses if r.status.code == 0 and r.result.exit_code == 0)
    return ok, wall


def run_budget(tmp: Path, label: str, worker: dict[str, object], actions: int) -> None:
    home = tmp / label
    with LreProcess(local_config(home, worker), home) as lre:
        monitor = Monitor("tree", str(lre.proc.pid), "0.05", out=home / "tree.json")
        try:
            ok, wall = asyncio.run(budget_case(lre.address, actions))
        finally:
            seen = monitor.stop()
    peak = seen["peak_rss_bytes"] / MiB
    print(
        f"{label:<10} succeeded {ok}/{actions}  wall {wall:6.1f} s  "
        f"peak action RSS {peak:7.0f} MiB  peak processes {seen['peak_processes']:.0f}"
    )
    if label.startswith("budget"):
        verdict = "PASS" if ok == actions and seen["peak_rss_bytes"] <= 2 * GiB else "FAIL"
        print(f"{'':<10} target: all succeed, peak <= 2048 MiB: {verdict}")


async def ladder_case(address: str) -> tuple[object, object]:
    client = ReapiClient(address)
    try:
        fits = await client.run([PY, "-c", GROW.format(mb=800)], env=ENV)
        too_big = await client.run([PY, "-c", GROW.format(mb=3000)], env=ENV)
    finally:
        await client.close()
    return fits, too_big


def run_ladder(tmp: Path) -> None:
    home = tmp / "ladder"
    rungs = (512 * MiB, GiB)
    worker = {
        "resources": {
            "memory_budget": "2GiB",
            "cold_memory": "256MiB",
            "ladder": ["512MiB", "1GiB"],
            "max_steps": 4,
        }
    }
    with LreProcess(local_config(home, worker), home) as lre:
        fits, too_big = asyncio.run(ladder_case(lre.address))
    expected = next(i for i, r in enumerate(rungs, start=1) if r * 1.2 > 800 * 10**6)
    steps = []
    db = home / "state" / "learned-reservations.sqlite3"
    if db.exists():
        steps = sqlite3.connect(db).execute("SELECT key, ladder_step FROM samples").fetchall()
    f_ok = fits.status.code == 0 and fits.result.exit_code == 0  # type: ignore[attr-defined]
    print(
        f"ladder     800 MB action: {'succeeded' if f_ok else 'FAILED'}; "
        f"expected step {expected}; learned (key, step): {steps}"
    )
    status = too_big.status  # type: ignore[attr-defined]
    t_ok = status.code == 8 and "peak RSS" in status.message
    print(
        f"ladder     3 GB action: code {status.code} ({'PASS' if t_ok else 'FAIL'}): "
        f"{status.message}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=40)
    parser.add_argument("--no-unbounded", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lre-bench-memory-") as d:
        tmp = Path(d)
        bounded = {"resources": {"memory_budget": "2GiB", "cold_memory": "256MiB"}}
        run_budget(tmp, "budget+cpu", bounded, args.actions)
        # The budget as the only bound: no action-count limit, CPU capacity far
        # beyond the queue, so memory admission alone decides what starts.
        budget_only = {
            "max_inflight_tasks": 0,
            "resources": {"cpu_count": 1000, "memory_budget": "2GiB", "cold_memory": "256MiB"},
        }
        run_budget(tmp, "budget", budget_only, args.actions)
        if not args.no_unbounded:
            unbounded = {
                "max_inflight_tasks": 0,
                "jobserver": {"enabled": False},
                # CPU capacity far beyond any queue: every action starts at once
                "resources": {"cpu_count": 1000, "memory_budget": 0, "live_memory_veto": False},
            }
            run_budget(tmp, "unbounded", unbounded, args.actions)
        run_ladder(tmp)


if __name__ == "__main__":
    main()
