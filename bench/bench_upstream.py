"""Fully cached Bazel builds through a laptop lre in front of an upstream.

``--upstream lre`` (default): three lre processes on 127.0.0.1, every file under
a temp dir: a *cluster* holding the team's cache, a *laptop* with filesystem
tiers over the cluster (``upload_policy`` never) and a *plain* lre without an
upstream. The generated C workspace is built once into the cluster and once
into the plain lre; then per round, each a ``bazel clean`` plus a timed build
that must be all remote cache hits (and the binary's checksum is checked):

- ``upstream_only``: a new laptop with an empty local tier (all read through);
- ``local_tier``: the same laptop again (served from its local tier);
- ``no_upstream``: the plain lre.

Target: median local_tier <= median no_upstream.

``--upstream buildgrid``: a real BuildGrid 0.4.4 with PostgreSQL and two host
workers (../shared/tools/peer/start_buildgrid.sh), lre started with
``lre up --detach`` and the lre.bazelrc it writes. Two workspaces with the same
sources (so the same digests), one built straight against BuildGrid, one only
through lre, each with its own Bazel server. One straight build with
--noremote_accept_cached fills BuildGrid's cache; then per round:

- ``straight_cached``: straight against BuildGrid, all remote cache hits;
- ``lre_cached_empty``: through a new lre whose local tier is empty;
- ``lre_cached_second``: the same lre again.

Targets: median lre_cached_empty <= 1.1 x straight_cached; lre_cached_second <
straight_cached.

Run::

    .venv/bin/python bench/bench_upstream.py --reps 5 [--upstream buildgrid]

A failed build or a build that is not all hits (or all remote) raises with
Bazel's log tail.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _client import LreProcess, free_port

from tests.e2e._bazel import BazelSession
from tests.e2e._workspace import Workspace, generate_workspace
from tests.upstream._cluster import laptop_config_text, upstream_config_text

#: A round's builds by name, appended to by each round.
Samples = dict[str, list[float]]


def timed_build(
    bazel: BazelSession,
    ws: Workspace,
    flags: list[str],
    *,
    spawns: str | None,
    checksum: bool = False,
) -> float:
    """``bazel clean`` then a timed build whose every spawn's runner says ``spawns``
    ("remote cache hit" or "remote"; None: not checked); raises AssertionError
    otherwise."""
    bazel.clean()
    started = time.monotonic()
    built = bazel.build([ws.target], flags)
    elapsed = time.monotonic() - started
    summary = built.check()
    assert spawns is None or summary.count(spawns) == ws.spawn_count, summary
    if checksum:
        out = subprocess.run([ws.binary, "100"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == ws.expected_checksum(100), out.stdout
    return elapsed


def cache_flags(address: str) -> list[str]:
    return [
        f"--remote_cache=grpc://{address}",
        "--remote_instance_name=team",
        "--remote_timeout=300",
        "--jobs=8",
    ]


def lre_rounds(top: Path, args: argparse.Namespace, say: Callable[[str], None]) -> Samples:
    samples: Samples = {"upstream_only": [], "local_tier": [], "no_upstream": []}
    ws = generate_workspace(top / "ws", modules=args.modules, funcs=args.funcs)
    say(f"workspace: {args.modules} modules x {args.funcs} funcs, {ws.spawn_count} spawns")
    with (
        LreProcess(upstream_config_text(top / "cluster"), top / "cluster") as cluster,
        LreProcess(upstream_config_text(top / "plain"), top / "plain") as plain,
        BazelSession(ws.root, top / "bazel-root", max_idle_secs=600) as bazel,
    ):
        bazel.build([ws.target])  # warm-up: Bazel's server and analysis
        # fill both caches from a local build
        timed_build(bazel, ws, cache_flags(cluster.address), spawns=None)
        timed_build(bazel, ws, cache_flags(plain.address), spawns=None)
        for rep in range(args.reps):
            home = top / f"laptop{rep}"
            with LreProcess(laptop_config_text(home, f"grpc://{cluster.address}"), home) as laptop:
                for name in ("upstream_only", "local_tier"):
                    samples[name].append(
                        timed_build(
                            bazel,
                            ws,
                            cache_flags(laptop.address),
                            spawns="remote cache hit",
                            checksum=True,
                        )
                    )
            shutil.rmtree(home, ignore_errors=True)
            samples["no_upstream"].append(
                timed_build(
                    bazel, ws, cache_flags(plain.address), spawns="remote cache hit", checksum=True
                )
            )
            say(f"round {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in samples.items()))
    return samples


def buildgrid_rounds(top: Path, args: argparse.Namespace, say: Callable[[str], None]) -> Samples:
    from tests.team._buildgrid import BuildGrid, straight_flags
    from tests.team._lre import TeamLre

    samples: Samples = {}
    top.chmod(0o755)  # PostgreSQL runs as user postgres and must reach its state
    grid = BuildGrid(top / "bg")
    try:
        grid.start()
        ws_ci = generate_workspace(top / "ws-ci", modules=args.modules, funcs=args.funcs)
        ws_lre = generate_workspace(top / "ws-lre", modules=args.modules, funcs=args.funcs)
        say(f"workspace: {args.modules} modules x {args.funcs} funcs, {ws_ci.spawn_count} spawns")
        straight = [*straight_flags(grid.url, jobs=16), "--remote_download_toplevel"]
        with (
            BazelSession(ws_ci.root, top / "bazel-ci") as ci,
            BazelSession(ws_lre.root, top / "bazel-lre") as laptop,
        ):
            fill = timed_build(ci, ws_ci, [*straight, "--noremote_accept_cached"], spawns="remote")
            say(f"fill (straight, executed on BuildGrid): {fill:.2f} s")
            # One lre address for every round, so lre.bazelrc never changes and
            # the Bazel server keeps its analysis cache, as the straight one does.
            ports = (free_port(), free_port())
            with TeamLre(top / "lre-warmup", grid, ws_lre.root, ports=ports):
                timed_build(laptop, ws_lre, [], spawns="remote cache hit")
            for rep in range(args.reps):
                row = {
                    "straight_cached": timed_build(ci, ws_ci, straight, spawns="remote cache hit")
                }
                with TeamLre(top / f"lre-c{rep}", grid, ws_lre.root, ports=ports):
                    for name in ("lre_cached_empty", "lre_cached_second"):
                        row[name] = timed_build(laptop, ws_lre, [], spawns="remote cache hit")
                for name, value in row.items():
                    samples.setdefault(name, []).append(value)
                say(f"round {rep + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))
    finally:
        grid.stop()
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upstream", choices=("lre", "buildgrid"), default="lre")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--modules", type=int, help="default 40 (lre), 24 (buildgrid)")
    parser.add_argument("--funcs", type=int, help="default 8 (lre), 3 (buildgrid)")
    args = parser.parse_args()
    by_lre = args.upstream == "lre"
    args.modules = args.modules or (40 if by_lre else 24)
    args.funcs = args.funcs or (8 if by_lre else 3)

    def say(text: str) -> None:
        print(text, flush=True)

    top = Path(tempfile.mkdtemp(prefix=f"lre-bench-{args.upstream}-"))
    try:
        samples = (lre_rounds if by_lre else buildgrid_rounds)(top, args, say)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, values in samples.items():
        say(f"{name:18s} median {medians[name]:6.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    if by_lre:
        say(f"target local_tier <= no_upstream: {medians['local_tier'] <= medians['no_upstream']}")
    else:
        for name in ("lre_cached_empty", "lre_cached_second"):
            say(f"{name} / straight_cached: {medians[name] / medians['straight_cached']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
