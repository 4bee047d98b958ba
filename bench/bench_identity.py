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
import shutil
from pathlib import Path

import trio
from _spawn_bench import parse_args, report, scratch_view, timed_run

from lre.worker._containment import choose_containment
from lre.worker._identity import ActionIdentity, resolve_action_user
from lre.worker._view import ActionView


def _fresh_work(view: ActionView) -> None:
    shutil.rmtree(Path(view.work) / "work", ignore_errors=True)


async def _main(args: argparse.Namespace) -> None:
    containment = choose_containment("pidns")
    nobody = resolve_action_user("unprivileged", viewed=True)
    unshare = shutil.which("unshare")
    assert nobody is not None and unshare is not None
    base, view = scratch_view("bench-identity-", args.dir)
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
                    _fresh_work(view)  # off the figures, as before every run
                    results[name].append(
                        await timed_run(containment, base, argv, view=view, identity=identity)
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report(results)


def main() -> None:
    trio.run(_main, parse_args(__doc__ or "", "pidns containment, switching users"))


if __name__ == "__main__":
    main()
