"""What containing action processes costs, and how fast everything dies with lre.

Run: .venv/bin/python bench/bench_containment.py [--rounds 5] [--actions 300]
     [--kills 5] [--only noop|kill|replay] [--view-off]

Backends: ``pidns``, ``userns`` and ``portable`` (those this machine has), all
measured in the same run, each round visiting every backend in turn (order
rotated every round). Per backend:

1. no-op actions through the real server: ``lre up`` (one per backend and
   round, same config but for ``containment``), a grpc.aio client keeping 16
   Execute calls of distinct ``/bin/true`` actions in flight: lre's own CPU
   per action (the server process, children excluded), the actions' CPU per
   action (every process lre reaped, which includes each backend's wrapper
   processes: ``timeout``, ``unshare``), actions/s; with ``--view-off`` two
   more sides of the first backend: ``-noview`` (``sandbox_view: false``, the
   view's cost) and ``-again`` (the same as the first, the run's A/A);
2. with ``--only replay`` (and only then), the same for the recorded
   actions of one clean Bazel build of the generated workspace
   (bench/_replay.py's recording; variants ``build`` and ``true``;
   ``bash bench/run_all.sh replay``);
3. SIGKILL of lre while an action has a background child, a ``setsid``
   child and a double-forked daemon running: the time until every one of
   them is gone (``--kills`` trials; the target is under 1 s).

Medians over rounds are printed, with each backend's ratio to ``pidns`` from
the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import LreProcess, ReapiClient, local_config, process_cpu

from lre.worker import ContainmentUnavailable, choose_containment

MODES = ("pidns", "userns", "portable")


def available_modes() -> list[str]:
    out = []
    for mode in MODES:
        try:
            choose_containment(mode)
        except ContainmentUnavailable as error:
            print(f"{mode}: unavailable here ({error})")
            continue
        out.append(mode)
    return out


def config_for(home: Path, mode: str, extra: dict[str, object] | None = None) -> str:
    worker: dict[str, object] = {"max_inflight_tasks": 16, "resources": {"cpu_count": 16}}
    worker.update(extra or {})
    worker["containment"] = mode
    return local_config(home, worker)


def start(home: Path, side: str, extra: dict[str, object] | None = None) -> LreProcess:
    """``lre up`` for a side: a backend, or ``BACKEND-noview`` / ``BACKEND-again``."""
    mode, _, variant = side.partition("-")
    if variant == "noview":
        extra = {**(extra or {}), "sandbox_view": False}
    return LreProcess(config_for(home, mode, extra), home)


async def noop_round(address: str, pid: int, tag: str, count: int) -> dict[str, float]:
    client = ReapiClient(address)
    try:
        warm = await asyncio.gather(
            *(client.prepare(["/bin/true", f"w{tag}{i}"]) for i in range(30))
        )
        await asyncio.gather(*(client.execute(d) for d in warm))
        digests = await asyncio.gather(
            *(client.prepare(["/bin/true", f"{tag}-{i}"]) for i in range(count))
        )
        pending = iter(digests)

        async def loop() -> None:
            for digest in pending:
                response = await client.execute(digest)
                assert response.result.exit_code == 0, response

        own0, kids0 = process_cpu(pid)
        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(16)))
        wall = time.perf_counter() - started
        own1, kids1 = process_cpu(pid)
    finally:
        await client.close()
    return {
        "lre_ms": (own1 - own0) / count * 1000,
        "actions_ms": (kids1 - kids0) / count * 1000,
        "per_s": count / wall,
    }


def report(title: str, rows: dict[str, list[dict[str, float]]], reference: str) -> None:
    print(f"\n{title} (median of {len(next(iter(rows.values())))} rounds; ratio to {reference})")
    ref = {key: statistics.median(r[key] for r in rows[reference]) for key in rows[reference][0]}
    for mode, samples in rows.items():
        parts = []
        for key in samples[0]:
            values = [s[key] for s in samples]
            med = statistics.median(values)
            ratio = med / ref[key] if ref[key] else float("nan")
            parts.append(f"{key} {med:.2f} ({ratio:.2f}x; {min(values):.2f}-{max(values):.2f})")
        print(f"  {mode:9s} " + ", ".join(parts))


def rotate(modes: list[str], r: int) -> list[str]:
    k = r % len(modes)
    return modes[k:] + modes[:k]


def bench_noop(tmp: Path, modes: list[str], args: argparse.Namespace) -> None:
    if args.view_off:
        modes = [*modes, f"{modes[0]}-noview", f"{modes[0]}-again"]
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in rotate(modes, r):
            home = tmp / f"noop-{mode}"
            with start(home, mode) as lre:
                row = asyncio.run(noop_round(lre.address, lre.proc.pid, f"{mode}{r}", args.actions))
            rows[mode].append(row)
            print(
                f"round {r + 1} {mode}: " + json.dumps({k: round(v, 2) for k, v in row.items()}),
                flush=True,
            )
    report("no-op /bin/true through gRPC, 16 in flight", rows, modes[0])


DAEMONS = (
    "sleep {m} & setsid sleep {m} & sh -c 'setsid sh -c \"sleep {m}\" & exit 0'; "
    "touch {ready}; exec sleep {m}"
)


def sleepers(marker: str) -> int:
    return sum(
        1
        for p in psutil.process_iter(["cmdline", "status"])
        if p.info["status"] != psutil.STATUS_ZOMBIE
        and (p.info["cmdline"] or [""])[-2:] == ["sleep", marker]
    )


async def kill_trial(tmp: Path, mode: str, trial: int) -> float:
    home = tmp / f"kill-{mode}-{trial}"
    marker = f"{6000 + trial}.{time.monotonic_ns() % 10**9:09d}"
    # the action's view hides the host's temporary directories: the ready file
    # goes to a directory the view shows writable
    shared = tmp / f"kill-shared-{mode}-{trial}"
    shared.mkdir(parents=True)
    ready = shared / "ready"
    lre = start(home, mode, {"sandbox_writable_paths": [str(shared)]})
    try:
        client = ReapiClient(lre.address)
        digest = await client.prepare(["/bin/sh", "-c", DAEMONS.format(m=marker, ready=ready)])
        task = asyncio.ensure_future(client.execute(digest))
        deadline = time.monotonic() + 30
        while not (ready.exists() and sleepers(marker) >= 4):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: the action's processes never all started")
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.6)  # the portable backend lists orphans every 0.25 s
        lre.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        while sleepers(marker) and time.monotonic() - killed < 10:  # noqa: ASYNC110 (polling)
            await asyncio.sleep(0.005)
        elapsed = time.monotonic() - killed
        left = sleepers(marker)
        task.cancel()
        await client.close()
    finally:
        lre.stop()
    if left:
        for p in psutil.process_iter(["cmdline"]):
            if (p.info["cmdline"] or [""])[-2:] == ["sleep", marker]:
                p.kill()
        return float("inf")
    return elapsed


def bench_kill(tmp: Path, modes: list[str], args: argparse.Namespace) -> None:
    print(f"\nSIGKILL of lre with 4 action processes (3 escaped the group), {args.kills} trials")
    for mode in modes:
        times = [asyncio.run(kill_trial(tmp, mode, t)) for t in range(args.kills)]
        shown = ", ".join("survived" if t == float("inf") else f"{t * 1000:.0f}" for t in times)
        worst = max(times)
        verdict = "ALL GONE < 1 s" if worst < 1 else "SURVIVORS or slow"
        print(f"  {mode:9s} ms until none left: {shown}  -> {verdict}")


def bench_replay(tmp: Path, modes: list[str], args: argparse.Namespace) -> None:
    from _replay import BAZEL_WORKER, record, replay_plans, replay_round

    home = tmp / "replay"
    extra = dict(BAZEL_WORKER)
    with start(home, modes[-1], extra) as lre:
        keys = record(lre, home, tmp, modules=40, funcs=8)
    print("replaying 'build' and 'true' per backend")

    async def one(address: str, pid: int) -> dict[str, float]:
        client = ReapiClient(address)
        try:
            plans = await replay_plans(client, keys)
            out: dict[str, float] = {}
            for variant in ("build", "true"):
                await replay_round(client, plans[variant], 16)  # warm
                own0, kids0 = process_cpu(pid)
                await replay_round(client, plans[variant], 16)
                own1, kids1 = process_cpu(pid)
                n = len(plans[variant])
                out[f"{variant}_lre_ms"] = (own1 - own0) / n * 1000
                out[f"{variant}_actions_ms"] = (kids1 - kids0) / n * 1000
            return out
        finally:
            await client.close()

    rows: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in rotate(modes, r):
            with start(home, mode, extra) as lre:
                row = asyncio.run(one(lre.address, lre.proc.pid))
            rows[mode].append(row)
            print(
                f"round {r + 1} {mode}: " + json.dumps({k: round(v, 2) for k, v in row.items()}),
                flush=True,
            )
    report("replayed Bazel actions, 16 in flight", rows, modes[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--actions", type=int, default=300)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--only", choices=("noop", "kill", "replay"), default=None)
    ap.add_argument("--view-off", action="store_true", help="no-op sides without the view, A/A")
    args = ap.parse_args()
    modes = available_modes()
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load {load:.2f}; backends: {', '.join(modes)}")
    parts: dict[str, Callable[[Path, list[str], argparse.Namespace], None]] = {
        "noop": bench_noop,
        "kill": bench_kill,
        "replay": bench_replay,
    }
    with tempfile.TemporaryDirectory(prefix="lre-bench-containment.") as name:
        for part, run in parts.items():
            if args.only != part and (args.only or part == "replay"):
                continue
            run(Path(name), modes, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
