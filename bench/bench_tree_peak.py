"""Micro-benchmark of pid 1 reporting the command tree's peak (GNU time,
``lre.worker.usage._tree_peak``) against the pid 1 it replaces (the pidns gate's
subshell, or ``timeout -- 0``): wall, lre CPU and action CPU per start+wait
of /bin/true.

Modes are interleaved action by action (their order rotated each time, so
that no mode always follows the same one), one action in flight, through the
real spawn path (``run_process``): for pidns in a view and without one, for
userns in a view, and for portable (no namespace, no view), each ``report``
(GNU time as pid 1, or as the first process under portable, a memfd made and
read per action) and ``plain`` (the containment's ``peak_tool`` cleared: the
namespace's pid 1 without the report, the bare command under portable), plus
``plain-again``, a second copy of one ``plain`` mode, whose difference from
it is the A/A spread of the machine.

Prints the medians as ``bench_view.py`` does (``_spawn_bench.report``).
Needs root (pidns). Takes a minute with the defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
from pathlib import Path

import trio
from _spawn_bench import parse_args, report, scratch_view, timed_run

from lre.worker.containment._containment import choose_containment
from lre.worker.directories._action_dirs import ActionDirectory, _empty_view


async def _main(args: argparse.Namespace) -> None:
    backends = {name: choose_containment(name) for name in ("pidns", "userns", "portable")}
    tool = {name: backend.peak_tool for name, backend in backends.items()}
    assert all(tool.values()), f"GNU time is not used here: {tool}"
    scratch = {name: scratch_view(f"bench-tree-peak-{name}-", args.dir) for name in backends}
    base, view = scratch["userns"]
    scratch["userns"] = (base, dataclasses.replace(view, xattrs=backends["userns"].overlay_xattrs))
    # (mode, backend, in a view, pid 1 reports)
    modes = [
        ("pidns-view-plain", "pidns", True, False),
        ("pidns-view-report", "pidns", True, True),
        ("pidns-view-plain-again", "pidns", True, False),
        ("pidns-plain", "pidns", False, False),
        ("pidns-report", "pidns", False, True),
        ("userns-view-plain", "userns", True, False),
        ("userns-view-report", "userns", True, True),
        ("portable-plain", "portable", False, False),
        ("portable-report", "portable", False, True),
    ]
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, *_ in modes}
    try:
        for round_no in range(args.rounds):
            for run_no in range(args.runs):  # the modes interleaved action by action
                turn = (round_no * args.runs + run_no) % len(modes)
                for name, backend, in_view, reports in modes[turn:] + modes[:turn]:
                    containment = backends[backend]
                    containment.peak_tool = tool[backend] if reports else None
                    base, view = scratch[backend]
                    results[name].append(
                        await timed_run(
                            containment,
                            base,
                            ["/bin/true"],
                            # the previous run's layers, emptied as recycling does
                            before_start=(lambda at=base: _recycled(at)) if in_view else None,
                            view=view if in_view else None,
                        )
                    )
    finally:
        for base, _ in scratch.values():
            shutil.rmtree(base, ignore_errors=True)
    report(results)


def _recycled(base: Path) -> None:
    assert _empty_view(ActionDirectory.at(base), (os.geteuid(),)), "recycling failed"


def main() -> None:
    trio.run(_main, parse_args(__doc__ or "", "pidns containment"))


if __name__ == "__main__":
    main()
