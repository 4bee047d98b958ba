"""Micro-benchmark of an action's view: wall and lre CPU per start+wait of /bin/true.

Runs ``run_process`` (the real spawn path, pidns containment) for
``--rounds`` rounds of ``--runs`` actions per mode, the modes interleaved
action by action, one action in flight: without a view (``none``); with
one (``view``: an action directory made the way ``ViewPolicy.view_for``
makes it, its layers emptied before each run by the tree's own recycling,
``_action_dirs._empty_view``, counted as lre's CPU and not as wall); where
the tree has ``on_view_held``, the same view held past the action's end
(``view-held``: closed in a thread afterwards as ``ActionDirectories``
does, that close's CPU counted as lre's, its wall not on the action's
path); and where the spawner mounts the view's /proc (Linux 6.15+),
``view-unshare``: the same view with ``unshare --mount-proc`` making its
/proc instead (the older way).

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
import inspect
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from lre.worker._action_dirs import ActionDirectory, _empty_view
from lre.worker._containment import choose_containment
from lre.worker._process import run_process
from lre.worker._view import ActionView


async def _one(
    containment: object, base: Path, view: ActionView | None, hold: bool
) -> tuple[float, float, float]:
    held: list[int] = []
    before = os.times()
    cpu = time.process_time()
    if view is not None:  # the previous run's layers, emptied as recycling does
        assert _empty_view(ActionDirectory.at(base), (os.geteuid(),)), "recycling failed"
    wall = time.perf_counter()
    outcome = await run_process(
        ["/bin/true"],
        cwd=base / "root",
        env={"PATH": "/usr/bin:/bin"},
        stdout_path=base / "stdout",
        stderr_path=base / "stderr",
        timeout=60,
        kill_grace=1,
        containment=containment,  # type: ignore[arg-type]
        view=view,
        **({"on_view_held": held.append} if hold else {}),
    )
    wall = time.perf_counter() - wall
    for fd in held:  # torn down off the action's path, as ActionDirectories does
        await trio.to_thread.run_sync(os.close, fd)
    cpu = time.process_time() - cpu
    after = os.times()
    children = (
        after.children_user + after.children_system - before.children_user - before.children_system
    )
    assert outcome.exit_code == 0, outcome
    return wall * 1000, cpu * 1000, children * 1000


async def _main(args: argparse.Namespace) -> None:
    containment = choose_containment("pidns")
    base = Path(tempfile.mkdtemp(prefix="bench-view-", dir=args.dir))
    for name in ("root", "tmp", "view/upper", "view/work"):
        (base / name).mkdir(parents=True)
    hidden = base / "hidden"
    hidden.mkdir()
    view = ActionView(
        root=str(base / "root"),
        upper=str(base / "view/upper"),
        work=str(base / "view/work"),
        tmp=str(base / "tmp"),
        xattrs="trusted",
        hidden=(str(hidden),),
    )
    gate = getattr(containment, "_gate_sh", None)
    modes: list[tuple[str, ActionView | None, object, bool]] = [
        ("none", None, gate, False),
        ("view", view, gate, False),
    ]
    if "on_view_held" in inspect.signature(run_process).parameters:
        modes.append(("view-held", view, gate, True))
    if gate is not None:
        modes.append(("view-unshare", view, None, False))
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, *_ in modes}
    try:
        for _ in range(args.rounds):
            for _ in range(args.runs):  # the modes interleaved action by action
                for name, shown, sh, hold in modes:
                    containment._gate_sh = sh  # type: ignore[attr-defined]
                    results[name].append(await _one(containment, base, shown, hold))
    finally:
        shutil.rmtree(base, ignore_errors=True)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10, help="actions per round and mode")
    parser.add_argument("--dir", default=os.getcwd(), help="where the action directory goes")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_view needs root (pidns containment)")
    trio.run(_main, args)


if __name__ == "__main__":
    main()
