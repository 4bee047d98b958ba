"""The trip of one Execute through lre's modules.

Starts ``lre up`` (this machine's default config) in a child process whose
threads all carry a profile hook, runs three warm-up actions, then records
every call into lre's own modules (generated code excluded) while one more
``/bin/true`` action is executed (its blobs uploaded before the recording).

Printed, from the recording (calls within one module are not counted):

- ``modules``: lre modules entered; ``module_edges``: distinct calls from
  one module into another (what a reader follows);
- ``package_crossings``: distinct calls from one of lre's packages into
  another (``*_subpackages``: the same with ``worker/view``,
  ``worker/outputs``... each a package of its own);
- ``package_revisits``: per thread, the packages in call order with repeats
  collapsed, counting each entry into a package the thread had already left
  (calls into the foundations every layer uses, ``digest``, ``errors`` and
  ``hop``, are left out, as calls into the standard library are);
- ``thread_hops``: steps of the whole recording, in call order, from one
  thread to another.

Periodic work (the 250 ms sampler) is included when it happens to run, so
each figure is the median of ``--runs`` (a fresh lre each). ``PYTHONPATH=TREE``
traces another checkout's lre.

    .venv/bin/python bench/execute_trip.py [--runs 5] [--show]

Fails (exit 1) if lre does not start or the action does not succeed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import runpy
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import ReapiClient, free_port

FOUNDATIONS = frozenset({"digest", "errors", "hop", "proto"})
LRE_UP = ("--no-client-config", "--port")
PACKAGE_ROOT = os.sep + "lre" + os.sep


def serve(out: str, argv: list[str]) -> None:
    """Run ``lre`` with ``argv`` in this process, recording calls into lre's
    modules between SIGUSR1 and SIGUSR2 (which writes them to ``out``)."""
    recording = False
    events: list[tuple[int, str, str | None, str]] = []

    def hook(frame: FrameType, event: str, _arg: Any) -> None:
        if not recording or event != "call":
            return
        callee = module_of(frame.f_code.co_filename)
        if callee is None:
            return
        back = frame.f_back
        caller = module_of(back.f_code.co_filename) if back is not None else None
        if caller == callee:
            return
        events.append((threading.get_ident(), threading.current_thread().name, caller, callee))

    def start(_signum: int, _frame: object) -> None:
        nonlocal recording
        events.clear()
        recording = True

    def stop(_signum: int, _frame: object) -> None:
        nonlocal recording
        recording = False
        Path(out).write_text(json.dumps(events))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    threading.setprofile(hook)
    sys.setprofile(hook)
    sys.argv = ["lre", *argv]
    runpy.run_module("lre", run_name="__main__")


def module_of(filename: str) -> str | None:
    """lre's module path of ``filename`` (``worker/view/_view``), None outside
    lre or in its generated code."""
    at = filename.rfind(PACKAGE_ROOT)
    if at < 0 or "/proto/" in filename:
        return None
    return filename[at + len(PACKAGE_ROOT) :].removesuffix(".py")


def package_of(module: str, depth: int = 1) -> str:
    """The package of ``module`` (``worker``), or with ``depth=2`` its
    subpackage (``worker/view``)."""
    return "/".join(module.split("/")[:-1][:depth]) or "lre"


def collapsed(items: list[str]) -> Iterator[str]:
    last = None
    for item in items:
        if item != last:
            yield item
            last = item


def figures(events: list[list[Any]]) -> dict[str, Any]:
    """The trip's figures from the recorded calls between modules."""
    edges = {(caller, callee) for _, _, caller, callee in events}
    result: dict[str, Any] = {
        "modules": len({e[3] for e in events}),
        "module_edges": len(edges),
        "thread_hops": len(list(collapsed([str(e[0]) for e in events]))) - 1,
        "threads": sorted({e[1] for e in events}),
    }
    for depth, suffix in ((1, ""), (2, "_subpackages")):
        by_thread: dict[int, list[str]] = {}
        for ident, _, _, callee in events:
            if package_of(callee) not in FOUNDATIONS:
                by_thread.setdefault(ident, []).append(package_of(callee, depth))
        revisits = 0
        trips: dict[int, list[str]] = {}
        for ident, packages in by_thread.items():
            trips[ident] = list(collapsed(packages))
            seen: set[str] = set()
            for package in trips[ident]:
                revisits += package in seen
                seen.add(package)
        crossings = {
            (package_of(a, depth), package_of(b, depth)) for a, b in edges if a is not None
        }
        result[f"package_crossings{suffix}"] = sum(1 for a, b in crossings if a != b)
        result[f"package_revisits{suffix}"] = revisits
        result[f"packages{suffix}"] = sorted({package_of(e[3], depth) for e in events})
        result[f"trips{suffix}"] = {
            f"{name} ({ident})": trips[ident] for ident, name, _, _ in events
        }
    return result


async def one_trip(address: str, server: subprocess.Popen[bytes]) -> None:
    """Warm lre up, then execute one action between the two signals."""
    client = ReapiClient(address)
    try:
        for _ in range(3):
            await client.run(["/bin/true"])
        digest = await client.prepare(["/bin/true"])
        server.send_signal(signal.SIGUSR1)
        await asyncio.sleep(0.2)
        response = await client.execute(digest)
        server.send_signal(signal.SIGUSR2)
        if response.status.code != 0 or response.result.exit_code != 0:
            raise SystemExit(f"the action failed: {response}")
    finally:
        await client.close()


def recorded(out: Path) -> list[list[Any]]:
    for _ in range(100):
        if out.exists() and out.stat().st_size:
            break
        time.sleep(0.05)
    result: list[list[Any]] = json.loads(out.read_text())
    return result


def wait_listening(port: int, server: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"lre exited with {server.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"lre did not listen within {timeout}s")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--show", action="store_true", help="print each thread's trip")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
        home = Path(scratch)
        for run in range(args.runs):
            port = free_port()
            out = home / f"trip-{run}.json"
            log = open(home / f"lre-{run}.log", "wb")  # noqa: SIM115 - closed below
            env = dict(os.environ) | {"LRE_HOME": str(home / str(run))}
            server = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--serve",
                    str(out),
                    "up",
                    "--no-tui",
                    *LRE_UP,
                    str(port),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=home,
            )
            try:
                wait_listening(port, server)
                asyncio.run(one_trip(f"127.0.0.1:{port}", server))
                results.append(figures(recorded(out)))
            finally:
                server.terminate()
                server.wait(30)
                log.close()
    keys = ("modules", "module_edges", "package_crossings", "package_revisits", "thread_hops")
    for key in (*keys, "package_crossings_subpackages", "package_revisits_subpackages"):
        values = [r[key] for r in results]
        print(f"{key}: median {statistics.median(values)} (runs: {values})")
    last = results[-1]
    print(f"packages: {', '.join(last['packages'])}")
    print(f"threads: {', '.join(last['threads'])}")
    if args.show:
        for thread, steps in last["trips_subpackages"].items():
            print(f"\n{thread}: {len(steps)} steps")
            print("  " + " > ".join(steps))


if __name__ == "__main__":
    main()
