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
import statistics
import tempfile
import time
from pathlib import Path

import trio

from lre.worker._action_dirs import ActionDirectory, _empty_view
from lre.worker._containment import choose_containment
from lre.worker._process import run_process
from lre.worker._view import ActionView


async def _main(args: argparse.Namespace) -> None:
    containment = choose_containment("pidns")
    base = Path(tempfile.mkdtemp(prefix="bench-view-helper-", dir=args.dir))
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
                held: list[int] = []
                cpu = time.process_time()
                assert _empty_view(ActionDirectory.at(base), (os.geteuid(),)), "recycling failed"
                wall = time.perf_counter()
                outcome = await run_process(
                    argv,
                    cwd=base / "root",
                    env={"PATH": "/usr/bin:/bin"},
                    stdout_path=base / "stdout",
                    stderr_path=base / "stderr",
                    timeout=60,
                    kill_grace=1,
                    containment=containment,
                    view=shown,
                    on_view_held=held.append if hold else None,
                )
                wall = time.perf_counter() - wall
                for fd in held:
                    await trio.to_thread.run_sync(os.close, fd)
                cpu = time.process_time() - cpu
                assert outcome.exit_code == 0, (name, (base / "stderr").read_text())
                results[name].append((wall * 1e3, cpu * 1e3, outcome.cpu_seconds * 1e3))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"# load {os.getloadavg()[0]:.1f}")
    for name, values in results.items():
        print(
            f"{name:10s} wall {statistics.median(v[0] for v in values):6.2f} ms  "
            f"lre cpu {statistics.median(v[1] for v in values):5.2f} ms  "
            f"action cpu (mean) {statistics.mean(v[2] for v in values):5.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helper", required=True, help="the compiled viewinit")
    parser.add_argument("--runs", type=int, default=40, help="actions per mode")
    parser.add_argument("--dir", default=os.getcwd(), help="where the action directory goes")
    trio.run(_main, parser.parse_args())


if __name__ == "__main__":
    main()
