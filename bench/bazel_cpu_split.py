"""Where the CPU of a clean Bazel build goes: local sandboxed against remote
through an already running lre, on the same machine.

Start lre first (``LRE_HOME=$(mktemp -d) .venv/bin/lre up --detach
--no-client-config --port 50091``), then::

    .venv/bin/python bench/bazel_cpu_split.py 127.0.0.1:50091 --lre-pid PID

Each round cleans and builds the generated C workspace once locally and once
through lre (order reversed every other round, ``--warmup`` rounds untimed)
and reads, around every build: the machine's busy CPU (/proc/stat, all
cores), the Bazel server JVM's own CPU, lre's own CPU and the CPU of the
actions lre ran (its reaped children). Local actions and sandboxing are what
is left of the busy CPU after the JVM. On a 2-core machine that a build
keeps busy, wall time follows busy CPU, so this says what a remote build
must save to match a local one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_bazel import remote_flags

from tests.e2e._bazel import BazelSession
from tests.e2e._workspace import generate_workspace

_TICK = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU time all cores spent not idle (nor waiting for I/O) since boot."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / _TICK


def own_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def children_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.children_user + times.children_system


def bazel_server(output_root: Path) -> psutil.Process:
    """The Bazel server JVM whose command line names ``output_root``."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any(str(output_root) in part for part in cmdline) and any(
            "A-server.jar" in part or part.startswith("--output_user_root") for part in cmdline
        ):
            return process
    raise RuntimeError(f"no Bazel server found for {output_root}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="lre's gRPC address, HOST:PORT")
    parser.add_argument("--lre-pid", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    lre = psutil.Process(args.lre_pid)
    columns = ("wall", "busy", "jvm", "lre", "lre actions")
    rows: dict[str, list[tuple[float, ...]]] = {"local": [], "remote": []}
    with tempfile.TemporaryDirectory(prefix="lre-bench-split-") as tmp:
        work = Path(tmp)
        ws = generate_workspace(work / "ws", modules=40, funcs=8)
        output_root = work / "bazel-root"
        with BazelSession(ws.root, output_root, max_idle_secs=600) as bazel:
            bazel.build([ws.target])
            jvm = bazel_server(output_root)
            for round_ in range(args.warmup + args.rounds):
                order = ("local", "remote") if round_ % 2 == 0 else ("remote", "local")
                for mode in order:
                    bazel.clean()
                    flags = remote_flags(args.address) if mode == "remote" else []
                    before = (
                        time.monotonic(),
                        busy_seconds(),
                        own_cpu(jvm),
                        own_cpu(lre),
                        children_cpu(lre),
                    )
                    result = bazel.build([ws.target], flags)
                    if result.returncode != 0:
                        raise RuntimeError(f"{mode} build failed:\n{result.output[-2000:]}")
                    after = (
                        time.monotonic(),
                        busy_seconds(),
                        own_cpu(jvm),
                        own_cpu(lre),
                        children_cpu(lre),
                    )
                    row = tuple(b - a for a, b in zip(before, after, strict=True))
                    timed = round_ >= args.warmup
                    if timed:
                        rows[mode].append(row)
                    label = "" if timed else " (warm-up)"
                    print(
                        f"round {round_ + 1} {mode}{label}: "
                        + ", ".join(f"{c} {v:.2f}s" for c, v in zip(columns, row, strict=True)),
                        flush=True,
                    )
    print(f"medians over {args.rounds} rounds (CPU-seconds per build; wall in seconds):")
    medians = {}
    for mode, table in rows.items():
        medians[mode] = [statistics.median(column) for column in zip(*table, strict=True)]
        print(
            f"  {mode}: "
            + ", ".join(f"{c} {v:.2f}" for c, v in zip(columns, medians[mode], strict=True))
        )
    local, remote = medians["local"], medians["remote"]
    print(f"  local actions + sandboxing (busy - jvm): {local[1] - local[2]:.2f}")
    print(f"  remote busy - local busy: {remote[1] - local[1]:+.2f}")
    print(f"  remote wall / local wall: {remote[0] / local[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
