"""Micro-benchmark of an action's identity: wall and CPU per start+wait of /bin/true in a view.

Runs ``run_process`` (the real spawn path, pidns containment, a view as
``bench_view.py`` makes it) for ``--rounds`` alternating rounds of ``--runs``
actions each, one in flight, in three modes:

- ``as-lre``: the command as lre's own user (``action_user: "root"``, the
  default);
- ``as-nobody``: through ``setpriv`` as ``nobody`` (``action_user:
  "unprivileged"``, ``lre/worker/_identity.py``): the identity locks the
  view's mounts;
- ``inner-userns``: as lre's user inside one more user namespace
  (``unshare --user --map-root-user``), the other way to lock the mounts
  (what ``userns`` does), for comparison.

Prints per mode the median wall time per action, the median CPU of lre (this
process, spawner threads included) and the mean CPU of the action's processes
(reaped children; 10 ms ticks, so only a mean over many actions means
anything). Needs root. Takes seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from lre.worker._containment import choose_containment
from lre.worker._identity import ActionIdentity, resolve_action_user
from lre.worker._process import run_process
from lre.worker._view import ActionView


async def _one(
    containment: object,
    base: Path,
    view: ActionView,
    argv: list[str],
    identity: ActionIdentity | None,
) -> tuple[float, float, float]:
    shutil.rmtree(Path(view.work) / "work", ignore_errors=True)
    before = os.times()
    cpu = time.process_time()
    wall = time.perf_counter()
    outcome = await run_process(
        argv,
        cwd=base / "root",
        env={"PATH": "/usr/bin:/bin"},
        stdout_path=base / "stdout",
        stderr_path=base / "stderr",
        timeout=60,
        kill_grace=1,
        containment=containment,  # type: ignore[arg-type]
        view=view,
        identity=identity,
    )
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    after = os.times()
    children = (
        after.children_user + after.children_system - before.children_user - before.children_system
    )
    assert outcome.exit_code == 0, outcome
    return wall * 1000, cpu * 1000, children * 1000


async def _main(args: argparse.Namespace) -> None:
    containment = choose_containment("pidns")
    nobody = resolve_action_user("unprivileged", viewed=True)
    unshare = shutil.which("unshare")
    assert nobody is not None and unshare is not None
    base = Path(tempfile.mkdtemp(prefix="bench-identity-", dir=args.dir))
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
    modes: list[tuple[str, list[str], ActionIdentity | None]] = [
        ("as-lre", ["/bin/true"], None),
        ("as-nobody", ["/bin/true"], nobody),
        ("inner-userns", [unshare, "--user", "--map-root-user", "--", "/bin/true"], None),
    ]
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _, _ in modes}
    try:
        for index in range(args.rounds):
            order = modes if index % 2 == 0 else modes[::-1]
            for name, argv, identity in order:
                for _ in range(args.runs):
                    results[name].append(await _one(containment, base, view, argv, identity))
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
        sys.exit("bench_identity needs root (pidns containment, switching users)")
    trio.run(_main, args)


if __name__ == "__main__":
    main()
