"""What the spawn micro-benchmark ``bench_view.py`` is built on:
a scratch action directory with a view over it, one timed ``run_process`` of a
command, the report and the command line.

Each measured action gives three figures in milliseconds: its wall time, the
CPU of this process (lre's side: spawner threads included) and the CPU of the
reaped children (the action's processes; 10 ms ticks, so only a mean over many
actions means anything).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from lre.worker.process._process import SpawnRequest, run_process
from lre.worker.view._view import ActionView

#: wall, lre CPU, action CPU (ms) of one action
Sample = tuple[float, float, float]


def scratch_view(prefix: str, where: str) -> tuple[Path, ActionView]:
    """A new action directory under ``where`` (root, tmp, the overlay's layers
    and one directory to hide) and the view a pidns worker would give it."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    for name in ("root", "tmp", "view/upper", "view/work", "hidden"):
        (base / name).mkdir(parents=True)
    view = ActionView(
        root=str(base / "root"),
        upper=str(base / "view/upper"),
        work=str(base / "view/work"),
        tmp=str(base / "tmp"),
        xattrs="trusted",
        hidden=(str(base / "hidden"),),
    )
    return base, view


async def timed_run(
    containment: object,
    base: Path,
    argv: list[str],
    *,
    before_start: Callable[[], None] | None = None,
    **spawn: Any,
) -> Sample:
    """Run ``argv`` in ``base/root`` as the worker does (``spawn``: more
    ``run_process`` arguments, e.g. ``view=``, ``identity=``); views handed
    over through ``on_view_held`` are closed after it, off its wall time.
    ``before_start`` runs first, on lre's CPU but off the wall time's clock
    start (e.g. the recycling of the previous run's layers). Raises
    ``AssertionError`` when the command fails."""
    held: list[int] = []
    if spawn.pop("hold", False):
        spawn["on_view_held"] = held.append
    before = os.times()
    cpu = time.process_time()
    if before_start is not None:
        before_start()
    wall = time.perf_counter()
    outcome = await run_process(
        SpawnRequest(
            argv,
            cwd=base / "root",
            env={"PATH": "/usr/bin:/bin"},
            stdout_path=base / "stdout",
            stderr_path=base / "stderr",
            timeout=60,
            kill_grace=1,
            containment=containment,
            **spawn,
        )
    )
    wall = time.perf_counter() - wall
    for fd in held:  # torn down off the action's path, as ActionDirectories does
        await trio.to_thread.run_sync(os.close, fd)
    cpu = time.process_time() - cpu
    after = os.times()
    children = (
        after.children_user + after.children_system - before.children_user - before.children_system
    )
    assert outcome.exit_code == 0, (outcome, (base / "stderr").read_text())
    return wall * 1000, cpu * 1000, children * 1000


def report(results: dict[str, list[Sample]]) -> None:
    """Print per mode the median wall and lre CPU and the mean action CPU."""
    import lre

    print(f"# lre from {os.path.dirname(lre.__file__)}; load {os.getloadavg()[0]:.2f}")
    for name, values in results.items():
        wall = statistics.median(w for w, _, _ in values)
        cpu = statistics.median(c for _, c, _ in values)
        children = statistics.mean(a for _, _, a in values)  # 10 ms ticks: a mean
        print(
            f"{name:12s} wall {wall:6.2f} ms  lre cpu {cpu:5.2f} ms  "
            f"action cpu (mean) {children:5.2f} ms  ({len(values)} actions)"
        )


def parse_args(doc: str, why_root: str) -> argparse.Namespace:
    """``--rounds``, ``--runs`` and ``--dir``; exits unless run as root."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10, help="actions per round and mode")
    parser.add_argument("--dir", default=os.getcwd(), help="where the action directory goes")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit(f"needs root ({why_root})")
    return args
