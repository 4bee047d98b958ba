"""Clean and cached Bazel builds of the generated C workspace: local vs lre vs a peer.

Start the servers first (for example ``lre up --detach --port 50051`` and the
peer from ../shared/tools/peer), then::

    .venv/bin/python bench/bench_bazel.py --reps 5 --lre 127.0.0.1:50051 \\
        [--peer 127.0.0.1:50071 --peer-instance main]
    .venv/bin/python bench/bench_bazel.py --modules 20 --reps 20 --warmup 2 \\
        --jobs 16 --remote-flag=--remote_download_toplevel --no-cached --lre 127.0.0.1:50191

Per round: a clean local (sandboxed) build; for each server a clean build
with ``--noremote_accept_cached`` (every action really executes remotely) and
a clean build with the cache allowed (all remote cache hits). Odd rounds run
the local build first, even rounds last: every build of a round is a little
faster than the one before it while Bazel's JVM keeps warming up, so a fixed
order favours whatever comes later. ``--warmup`` untimed rounds (default 2)
come first for the same reason. ``--no-cached`` leaves the cached builds out
(the clean-build comparison alone).
Each timed build is checked: the right kinds of process in Bazel's summary and
the binary's checksum. Medians and the ratios the targets are stated in
(remote/local <= 1.0, cached rebuild <= 1.0 s), plus the remote/local ratio of
each round and their median, go to stdout. Everything Bazel writes stays in
a temporary directory; the Bazel server is shut down at the end.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e._bazel import BazelSession, ProcessSummary
from tests.e2e._workspace import Workspace, generate_workspace


def remote_flags(address: str) -> list[str]:
    """The flags ``lre.bazelrc`` gives a Bazel 4 user, with cache lookups off:
    every action of a clean build executes on the server at ``address``."""
    return [
        *_remote_flags(address, "main", ["cpu_count=1", "OSFamily=Linux"], 16),
        "--remote_download_toplevel",
        "--noremote_accept_cached",
    ]


def _remote_flags(endpoint: str, instance: str, properties: list[str], jobs: int) -> list[str]:
    flags = [
        f"--remote_executor=grpc://{endpoint}",
        f"--remote_instance_name={instance}",
        "--spawn_strategy=remote",
        f"--jobs={jobs}",
        "--remote_timeout=300",
    ]
    flags += [f"--remote_default_exec_properties={p}" for p in properties]
    return flags


def _timed_clean_build(
    bazel: BazelSession, ws: Workspace, flags: list[str]
) -> tuple[float, ProcessSummary]:
    """Seconds of ``bazel build`` after ``bazel clean``; raises if the build fails."""
    bazel.clean()
    start = time.monotonic()
    result = bazel.build([ws.target], flags)
    elapsed = time.monotonic() - start
    if result.returncode != 0 or result.summary is None:
        tail = "\n".join(result.output.splitlines()[-30:])
        raise RuntimeError(f"bazel build {flags} failed:\n{tail}")
    out = subprocess.run([ws.binary, "100"], capture_output=True, text=True, check=True)
    if out.stdout.strip() != ws.expected_checksum(100):
        raise RuntimeError(f"wrong checksum {out.stdout.strip()!r} after {flags}")
    return elapsed, result.summary


def _check(kind: str, summary: ProcessSummary) -> None:
    """Raise unless every spawn ran the way ``kind`` says it must."""
    if kind == "local" and summary.local != summary.spawns:
        raise RuntimeError(f"local build ran remote spawns: {summary}")
    if kind == "exec" and summary.count("remote") != summary.spawns:
        raise RuntimeError(f"not every spawn executed remotely: {summary}")
    if kind == "cached" and summary.count("remote cache hit") != summary.spawns:
        raise RuntimeError(f"not every spawn was a remote cache hit: {summary}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=5, help="rounds; medians are taken (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    ap.add_argument("--modules", type=int, default=40)
    ap.add_argument("--funcs", type=int, default=8, help="functions per module (compile cost)")
    ap.add_argument("--jobs", type=int, default=8, help="bazel --jobs for remote builds")
    ap.add_argument("--lre", metavar="HOST:PORT", help="lre endpoint")
    ap.add_argument("--lre-instance", default="main")
    ap.add_argument(
        "--lre-property", action="append", default=None, help="default: cpu_count=1, OSFamily=Linux"
    )
    ap.add_argument("--peer", metavar="HOST:PORT", help="peer REAPI endpoint (e.g. BuildGrid)")
    ap.add_argument("--peer-instance", default="main")
    ap.add_argument("--peer-property", action="append", default=[])
    ap.add_argument(
        "--remote-flag",
        action="append",
        default=[],
        help="an extra Bazel flag for every remote build (lre and peer alike)",
    )
    ap.add_argument("--no-cached", action="store_true", help="leave the cached builds out")
    args = ap.parse_args()

    servers: dict[str, list[str]] = {}
    if args.lre:
        props = args.lre_property or ["cpu_count=1", "OSFamily=Linux"]
        servers["lre"] = [
            *_remote_flags(args.lre, args.lre_instance, props, args.jobs),
            *args.remote_flag,
        ]
    if args.peer:
        servers["peer"] = [
            *_remote_flags(args.peer, args.peer_instance, args.peer_property, args.jobs),
            *args.remote_flag,
        ]

    with tempfile.TemporaryDirectory(prefix="lre-bench-") as tmp:
        work = Path(tmp)
        ws = generate_workspace(work / "ws", modules=args.modules, funcs=args.funcs)
        samples: dict[str, list[float]] = {"local": []}
        for name in servers:
            samples[f"{name}_exec"] = []
            if not args.no_cached:
                samples[f"{name}_cached"] = []
        with BazelSession(ws.root, work / "bazel-root", max_idle_secs=600) as bazel:
            bazel.build([ws.target])  # warm-up: server start, toolchain autoconfiguration

            def local_build() -> float:
                seconds, summary = _timed_clean_build(bazel, ws, [])
                _check("local", summary)
                return seconds

            def remote_builds(flags: list[str]) -> tuple[float, float]:
                seconds, summary = _timed_clean_build(
                    bazel, ws, [*flags, "--noremote_accept_cached"]
                )
                _check("exec", summary)
                if args.no_cached:
                    return seconds, 0.0
                cached, summary = _timed_clean_build(bazel, ws, flags)
                _check("cached", summary)
                return seconds, cached

            for _ in range(args.warmup):
                local_build()
                for flags in servers.values():
                    remote_builds(flags)
            for rep in range(args.reps):
                local_first = rep % 2 == 0
                if local_first:
                    samples["local"].append(local_build())
                for name, flags in servers.items():
                    seconds, cached = remote_builds(flags)
                    samples[f"{name}_exec"].append(seconds)
                    if not args.no_cached:
                        samples[f"{name}_cached"].append(cached)
                if not local_first:
                    samples["local"].append(local_build())
                print(
                    f"round {rep + 1} ({'local first' if local_first else 'local last'}): "
                    + ", ".join(f"{k}={v[-1]:.2f}s" for k, v in samples.items()),
                    flush=True,
                )

    medians = {k: statistics.median(v) for k, v in samples.items()}
    ratios = {
        f"{name}_exec_over_local": medians[f"{name}_exec"] / medians["local"] for name in servers
    }
    # The same ratio paired round by round: local builds get faster as Bazel's
    # JVM warms up, which separate medians do not pair.
    paired = {
        f"{name}_exec_over_local_per_round": [
            remote / local
            for remote, local in zip(samples[f"{name}_exec"], samples["local"], strict=True)
        ]
        for name in servers
    }
    for key, value in medians.items():
        print(f"median {key}: {value:.2f} s")
    for key, value in ratios.items():
        print(f"{key}: {value:.2f}")
    for key, values in paired.items():
        print(
            f"{key}: median {statistics.median(values):.2f} "
            f"(rounds: {', '.join(f'{v:.2f}' for v in values)})"
        )
    if "lre" in servers:
        clean_met = ratios["lre_exec_over_local"] <= 1.0
        cached_met = (
            "" if args.no_cached else f"; lre cached <= 1.0 s: {medians['lre_cached'] <= 1.0}"
        )
        print(f"targets: lre clean <= 1.0x local: {clean_met}{cached_met}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
