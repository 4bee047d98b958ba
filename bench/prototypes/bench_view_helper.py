"""Where a view's mount work runs: lre's spawner thread, or the action's own process.

An experiment for issue 27's CPU bound, not a shipped path. Runs
``run_process`` (pidns containment, one action in flight, the modes
interleaved action by action) of ``/bin/true``:

- ``none``: no view;
- ``view``: lre's view (the spawner builds it, the ``sh`` gate waits for
  its /proc);
- ``view-held``: the same, its mount namespace held and closed afterwards
  in a thread (as ``ActionDirectories`` does; that round trip is counted);
- ``helper``: no view from lre; the command is ``viewinit`` (``viewinit.c``
  next to this file, compiled with ``gcc -O2``), which makes the same
  mounts in the action's own process after the fork and then executes
  ``/bin/true`` (it is pid 2 there, after ``timeout``).

Prints median wall and lre CPU per action (this process, recycling of the
layers included) and the mean of the action's own CPU (rusage of its
processes). Needs root. Raises ``AssertionError`` when an action fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import trio

from lre.worker._action_dirs import ActionDirectory, _empty_view
from lre.worker._containment import choose_containment
from lre.worker._view import ActionView

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/, for _spawn_bench
from _spawn_bench import report, scratch_view, timed_run


async def _main(args: argparse.Namespace) -> None:
    containment = choose_containment("pidns")
    base, view = scratch_view("bench-view-helper-", args.dir)
    helper = [args.helper, view.root, view.upper, view.work, view.tmp, "1", str(base / "hidden")]
    modes: dict[str, tuple[list[str], ActionView | None, bool]] = {
        "none": (["/bin/true"], None, False),
        "view": (["/bin/true"], view, False),
        "view-held": (["/bin/true"], view, True),
        "helper": ([*helper, "--", "/bin/true"], None, False),
    }
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in modes}
    try:
        for _ in range(args.runs):
            for name, (argv, shown, hold) in modes.items():
                results[name].append(
                    await timed_run(
                        containment,
                        base,
                        argv,
                        before_start=lambda: _recycled(base),
                        view=shown,
                        hold=hold,
                    )
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report(results)


def _recycled(base: Path) -> None:
    assert _empty_view(ActionDirectory.at(base), (os.geteuid(),)), "recycling failed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helper", required=True, help="the compiled viewinit")
    parser.add_argument("--runs", type=int, default=40, help="actions per mode")
    parser.add_argument("--dir", default=os.getcwd(), help="where the action directory goes")
    trio.run(_main, parser.parse_args())


if __name__ == "__main__":
    main()
