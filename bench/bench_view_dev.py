"""Micro-benchmark of the view's /dev: spawner-thread CPU per action.

In one thread, as a spawner does (``unshare(CLONE_NEWNS)``, shape, ``setns``
back), for ``--rounds`` x ``--runs`` views per mode, the modes interleaved
view by view (the order rotated each time):

- ``dev:template`` / ``dev:template-again``: ``DevTree.mount`` cloning the
  template made once (two labels of the same mode: their spread is the
  A/A noise);
- ``dev:per-action``: ``DevTree(template=False).mount``, the whole tree
  built in each view (what kernels before 6.15 get);
- ``view:with-dev`` / ``view:no-dev``: the whole ``build_view`` of a scratch
  action directory, with the /dev and with ``mount_dev`` made a no-op (what
  main did, less the nodev of the writable clones).

Each figure is the thread CPU (``time.thread_time``) of the piece alone,
median over the views, in microseconds; wall is printed too. Needs root
(CAP_SYS_ADMIN for mount namespaces). Takes seconds.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import lre.worker._view as view_module
from lre.worker._view import ActionView, build_view
from lre.worker._view_dev import DevTree

_CLONE_FS = 0x200
_CLONE_NEWNS = 0x20000
_LIBC = ctypes.CDLL(None, use_errno=True)


def _check(result: int, call: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{call}: {os.strerror(code)}")


def _scratch(where: str, n: int) -> ActionView:
    base = Path(where) / f"v{n}"
    for name in ("root", "tmp", "upper", "work", "hidden"):
        (base / name).mkdir(parents=True)
    return ActionView(
        root=str(base / "root"),
        upper=str(base / "upper"),
        work=str(base / "work"),
        tmp=str(base / "tmp"),
        xattrs="trusted",
        hidden=(str(base / "hidden"),),
    )


def _bench(args: argparse.Namespace, scratch: str) -> dict[str, list[tuple[float, float]]]:
    template, again, per_action = DevTree(), DevTree(), DevTree(template=False)
    real_mount_dev = view_module.mount_dev
    counter = iter(range(10**9))

    def slave_root() -> None:  # what build_view does first: nothing reaches the host
        view_module._setattr("/", propagation=view_module._MS_SLAVE, recursive=True)

    def with_view(dev: Callable[[], None]) -> Callable[[], None]:
        view = _scratch(scratch, next(counter))

        def run() -> None:
            view_module.mount_dev = dev  # type: ignore[assignment]
            try:
                build_view(view)
            finally:
                view_module.mount_dev = real_mount_dev

        return run

    modes: dict[str, Callable[[], Callable[[], None] | None]] = {
        "dev:template": lambda: template.mount,
        "dev:template-again": lambda: again.mount,
        "dev:per-action": lambda: per_action.mount,
        "view:with-dev": lambda: with_view(real_mount_dev),
        "view:no-dev": lambda: with_view(lambda: None),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in modes}
    base = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    _check(_LIBC.unshare(_CLONE_FS), "unshare(CLONE_FS)")
    try:
        names = list(modes)
        for n in range(args.rounds * args.runs):
            # each mode takes each place in turn (the first after a teardown pays more)
            for name in names[n % len(names) :] + names[: n % len(names)]:
                make = modes[name]
                piece = make()
                _check(_LIBC.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
                try:
                    if name.startswith("dev:"):
                        slave_root()
                    assert piece is not None
                    cpu, wall = time.thread_time(), time.perf_counter()
                    piece()
                    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                finally:
                    _check(_LIBC.setns(base, _CLONE_NEWNS), "setns back")
                results[name].append((cpu * 1e6, wall * 1e6))
    finally:
        os.close(base)
    print(f"# template mode chosen: {template.mode}; kernel {os.uname().release}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=20, help="views per round and mode")
    parser.add_argument("--dir", default="/var/tmp", help="where the scratch directories go")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (mount namespaces)")
    scratch = tempfile.mkdtemp(prefix="bench-view-dev-", dir=args.dir)
    out: dict[str, list[tuple[float, float]]] = {}
    try:
        thread = threading.Thread(target=lambda: out.update(_bench(args, scratch)))
        thread.start()
        thread.join()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"# load {os.getloadavg()[0]:.2f}; {args.rounds * args.runs} views per mode")
    for name, values in out.items():
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        print(f"{name:20s} thread cpu {cpu:7.1f} us  wall {wall:7.1f} us")


if __name__ == "__main__":
    main()
