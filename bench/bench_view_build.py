"""CPU of building one action's view, alone: ``build_view`` as a spawner thread runs it.

Needs root (CAP_SYS_ADMIN). Sides are source trees (``NAME=TREE``), each run
in its own interpreter with ``TREE`` first on ``PYTHONPATH``, in alternating
rounds. Each round builds ``--views`` views in one thread, each with the
hidden paths a worker's policy has here (the socket masks and three lre
directories), and times the thread's CPU (``time.thread_time``: kernel time
included) from leaving lre's namespace to being back in it, the copy
dropped, less the overlay's creation (the same call on every side, and the
noisiest: its probes write the upper filesystem; ``whole`` includes it).
A tree whose ``build_view`` enters its namespace itself (the template) is
called as it is; an older one after ``unshare(CLONE_NEWNS)``, as its
spawner did.

    sudo .venv/bin/python bench/bench_view_build.py --rounds 10 base=/path/main new=.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import ctypes, json, os, shutil, sys, tempfile, threading, time
from lre.worker.view import _view
from lre.worker.view._view import ActionView, build_view
from lre.worker.view._socket_masks import socket_masks

views = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
enters_itself = hasattr(_view, "TEMPLATES")  # a tree with the view's template
overlay = [0.0]
_overlay_mount = _view.overlay_mount


def timed_overlay(view):
    start = time.thread_time()
    try:
        return _overlay_mount(view)
    finally:
        overlay[0] += time.thread_time() - start


_view.overlay_mount = timed_overlay
base = tempfile.mkdtemp(prefix="lre-view-bench-", dir="/var/tmp")
home = os.path.join(base, "home")
hidden = [os.path.join(home, name) for name in ("work", "cas", "state")]
for path in hidden:
    os.makedirs(path)
hidden = tuple(sorted({*hidden, *socket_masks(os.environ, [0])}))
times = []

def run():
    assert libc.unshare(0x200) == 0  # CLONE_FS, as a spawner thread
    own = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    for n in range(views + 5):
        action = os.path.join(home, "work", f"a{n}")
        for part in ("root", "tmp", "view/upper", "view/work"):
            os.makedirs(os.path.join(action, part))
        view = ActionView(
            root=f"{action}/root", upper=f"{action}/view/upper", work=f"{action}/view/work",
            tmp=f"{action}/tmp", xattrs="trusted", hidden=hidden,
        )
        if n == 5:
            overlay[0] = 0.0
        start = time.thread_time()
        if not enters_itself:
            assert libc.unshare(0x20000) == 0
        build_view(view)
        assert libc.setns(own, 0x20000) == 0
        if n >= 5:  # the first ones make the template and /dev's
            times.append(time.thread_time() - start)

thread = threading.Thread(target=run)
thread.start()
thread.join()
shutil.rmtree(base)
whole = 1000 * sum(times) / len(times)
print(json.dumps({"per_view_ms": whole - 1000 * overlay[0] / len(times), "whole_ms": whole}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sides", nargs="+", metavar="NAME=TREE")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--views", type=int, default=200)
    args = parser.parse_args()
    sides = dict(side.split("=", 1) for side in args.sides)
    results: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        line = []
        for name in order:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(sides[name])}
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, str(args.views)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            figures = json.loads(out)
            results[name].append(figures["per_view_ms"])
            line.append(f"{name}={figures['per_view_ms']:.3f} (whole {figures['whole_ms']:.3f})")
        print(f"round {round_ + 1}: " + ", ".join(line) + " ms CPU per view", flush=True)
    first = next(iter(sides))
    for name, figures in results.items():
        diffs = [a - b for a, b in zip(figures, results[first], strict=True)]
        print(
            f"{name}: median {statistics.median(figures):.3f} ms CPU per view, overlay aside "
            f"(min {min(figures):.3f}); median per-round difference to {first} "
            f"{statistics.median(diffs):+.3f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
