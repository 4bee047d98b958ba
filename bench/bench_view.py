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
path); where the tree has ``_idmap``,
``view-idmap``: the same view with its lower layer idmapped (lre's uid
shown as nobody's, as for ``action_user: "unprivileged"``; the command
still runs as root, so only the view's own cost differs).

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
import importlib.util
import os
import shutil
from pathlib import Path

import trio
from _spawn_bench import parse_args, report, scratch_view, timed_run

from lre.worker.containment._containment import choose_containment
from lre.worker.directories._action_dirs import ActionDirectory, _empty_view
from lre.worker.view._view import ActionView


async def _main(args: argparse.Namespace) -> None:
    containment = choose_containment("pidns")
    base, view = scratch_view("bench-view-", args.dir)
    gate = getattr(containment, "_gate_sh", None)
    modes: list[tuple[str, ActionView | None, object, bool]] = [
        ("none", None, gate, False),
        ("view", view, gate, False),
    ]
    modes.append(("view-held", view, gate, True))
    idmap = None
    if importlib.util.find_spec("lre.worker._idmap") is not None:
        from lre.worker._idmap import open_input_idmap

        idmap = open_input_idmap((65534, 65534), base.parent, view.xattrs)
        modes.append(("view-idmap", dataclasses.replace(view, idmap=idmap.fd), gate, False))
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, *_ in modes}
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
        if idmap is not None:
            idmap.close()
    report(results)


def _recycled(base: Path) -> None:
    assert _empty_view(ActionDirectory.at(base), (os.geteuid(),)), "recycling failed"


def main() -> None:
    trio.run(_main, parse_args(__doc__ or "", "pidns containment"))


if __name__ == "__main__":
    main()
