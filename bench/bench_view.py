"""Micro-benchmark of an action's view: wall and lre CPU per start+wait of /bin/true.

Runs ``run_process`` (the real spawn path, pidns containment) for
``--rounds`` rounds of ``--runs`` actions per mode, the modes interleaved
action by action, one action in flight: without a view (``none``); with
one (``view``: an action directory made the way ``ViewPolicy.view_for``
makes it, its layers emptied before each run by the tree's own recycling,
``_action_dirs._empty_view``, counted as lre's CPU and not as wall); the
same view held past the action's end (``view-held``: closed in a thread
afterwards as ``ActionDirectories`` does, that close's CPU counted as
lre's, its wall not on the action's path); ``view-idmap``: the same view
with its lower layer idmapped (lre's uid shown as nobody's, as for
``action_user: "unprivileged"``; the command still runs as root, so only
the view's own cost differs).

Prints the medians of wall time per action and of lre's own CPU (this
process: spawner threads included, the actions' processes not) per action,
and the mean CPU of the action's processes (reaped children: ``timeout``,
the gate or ``unshare``, ``/bin/true``, and the kernel's work on their
behalf, such as a mount namespace's teardown; 10 ms ticks, so only a mean
over many actions means anything).

To compare two trees, run it once per tree with that tree first on the path
(``PYTHONPATH=/path/to/tree``). Needs root (pidns). Takes seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from lre.worker._idmap import open_input_idmap
from lre.worker.containment._containment import choose_containment
from lre.worker.directories._action_dirs import ActionDirectory, _empty_view
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


async def _main(args: argparse.Namespace) -> None:
    containment = choose_containment("pidns")
    base, view = scratch_view("bench-view-", args.dir)
    gate = getattr(containment, "_gate_sh", None)
    idmap = open_input_idmap((65534, 65534), base.parent, view.xattrs)
    modes: list[tuple[str, ActionView | None, object, bool]] = [
        ("none", None, gate, False),
        ("view", view, gate, False),
        ("view-held", view, gate, True),
        ("view-idmap", dataclasses.replace(view, idmap=idmap.fd), gate, False),
    ]
    results: dict[str, list[Sample]] = {name: [] for name, *_ in modes}
    try:
        for _ in range(args.rounds):
            for _ in range(args.runs):  # the modes interleaved action by action
                for name, shown, sh, hold in modes:
                    containment._gate_sh = sh  # type: ignore[attr-defined]
                    recycle = (
                        # the previous run's layers, emptied as recycling does
                        (lambda: _recycled(base)) if shown is not None else None
                    )
                    results[name].append(
                        await timed_run(
                            containment,
                            base,
                            ["/bin/true"],
                            before_start=recycle,
                            view=shown,
                            hold=hold,
                        )
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)
        idmap.close()
    report(results)


def _recycled(base: Path) -> None:
    assert _empty_view(ActionDirectory.at(base), (os.geteuid(),)), "recycling failed"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10, help="actions per round and mode")
    parser.add_argument("--dir", default=os.getcwd(), help="where the action directory goes")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (pidns containment)")
    trio.run(_main, args)


if __name__ == "__main__":
    main()
