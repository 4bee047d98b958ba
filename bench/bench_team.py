"""lre in front of a real BuildGrid 0.4.4 (docs/performance.md, "Upstream and team cluster").

Everything on this machine: BuildGrid with its PostgreSQL and two host
workers (../shared/tools/peer/start_buildgrid.sh), lre (``lre up --detach``
with configs/team-cache.json5 and the lre.bazelrc it writes) and Bazel 4.2.3
building a generated C workspace. Two workspaces with the same sources (so
the same action digests): one only ever built straight against BuildGrid,
one only through lre, each with its own Bazel server.

Setup: one build straight against BuildGrid with --noremote_accept_cached
fills its cache. Then ``--reps`` rounds, alternating, each timing one
``bazel build`` after ``bazel clean`` (lre is started before and stopped
after, outside the timing):

- ``straight_cached``: straight against BuildGrid, all remote cache hits;
- ``lre_cached_empty``: through a new lre whose local tier is empty (every
  hit and output read through from BuildGrid);
- ``lre_cached_second``: the same lre again (its local tier now has it all);
- ``lre_local_only``: through a new lre, --noremote_accept_cached, no
  overflow: every action runs on the laptop's worker;
- ``lre_overflow``: the same with LRE_OVERFLOW_QUEUE_DEPTH=1: actions beyond
  one waiting locally run on BuildGrid.

Run::

    .venv/bin/python bench/bench_team.py --reps 5 --out bench/results/team.txt

Targets: median lre_cached_empty <= 1.1 x straight_cached;
lre_cached_second < straight_cached.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e._bazel import BazelSession, ProcessSummary
from tests.e2e._workspace import Workspace, generate_workspace
from tests.team._buildgrid import BuildGrid, straight_flags
from tests.team._lre import TeamLre, free_port, upstream_counters


def timed_build(
    bazel: BazelSession, ws: Workspace, flags: list[str], check: Callable[[ProcessSummary], None]
) -> float:
    bazel.clean()
    started = time.monotonic()
    built = bazel.build([ws.target], flags)
    elapsed = time.monotonic() - started
    summary = built.check()
    check(summary)
    return elapsed


def all_hits(ws: Workspace) -> Callable[[ProcessSummary], None]:
    def check(summary: ProcessSummary) -> None:
        assert summary.count("remote cache hit") == ws.spawn_count, summary

    return check


def all_remote(ws: Workspace) -> Callable[[ProcessSummary], None]:
    def check(summary: ProcessSummary) -> None:
        assert summary.count("remote") == ws.spawn_count, summary

    return check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--modules", type=int, default=24)
    parser.add_argument("--funcs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="raw log + JSON summary")
    args = parser.parse_args()

    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    top = Path(tempfile.mkdtemp(prefix="lre-bench-team-"))
    top.chmod(0o755)  # PostgreSQL runs as user postgres and must reach its state
    grid = BuildGrid(top / "bg")
    times: dict[str, list[float]] = {}
    forwarded: list[int] = []
    try:
        started = time.monotonic()
        grid.start()
        say(f"BuildGrid on {grid.address} ready in {time.monotonic() - started:.1f} s")
        ws_ci = generate_workspace(top / "ws-ci", modules=args.modules, funcs=args.funcs)
        ws_lre = generate_workspace(top / "ws-lre", modules=args.modules, funcs=args.funcs)
        say(f"workspace: {args.modules} modules x {args.funcs} funcs, {ws_ci.spawn_count} spawns")
        with (
            BazelSession(ws_ci.root, top / "bazel-ci") as ci,
            BazelSession(ws_lre.root, top / "bazel-lre") as laptop,
        ):
            fill = timed_build(
                ci,
                ws_ci,
                [*straight_flags(grid.url, jobs=16, toplevel=True), "--noremote_accept_cached"],
                all_remote(ws_ci),
            )
            say(f"fill (straight, executed on BuildGrid): {fill:.2f} s")
            # One lre address for every round, so lre.bazelrc never changes and
            # the Bazel server keeps its analysis cache, as the straight one does.
            ports = (free_port(), free_port())
            with TeamLre(top / "lre-warmup", grid, ws_lre.root, ports=ports):
                warm = timed_build(laptop, ws_lre, [], all_hits(ws_lre))
            say(f"warm-up through lre (Bazel server start, analysis): {warm:.2f} s")
            for rep in range(args.reps):
                row: dict[str, float] = {}
                row["straight_cached"] = timed_build(
                    ci, ws_ci, straight_flags(grid.url, jobs=16, toplevel=True), all_hits(ws_ci)
                )
                with TeamLre(top / f"lre-c{rep}", grid, ws_lre.root, ports=ports) as lre:
                    row["lre_cached_empty"] = timed_build(laptop, ws_lre, [], all_hits(ws_lre))
                    row["lre_cached_second"] = timed_build(laptop, ws_lre, [], all_hits(ws_lre))
                    hits = upstream_counters(lre.http_stats(), "upstream-ac").get("ac_hits", 0)
                no_cache = ["--noremote_accept_cached"]
                with TeamLre(top / f"lre-l{rep}", grid, ws_lre.root, ports=ports):
                    row["lre_local_only"] = timed_build(
                        laptop, ws_lre, no_cache, all_remote(ws_lre)
                    )
                with TeamLre(
                    top / f"lre-o{rep}", grid, ws_lre.root, overflow_queue_depth=1, ports=ports
                ) as lre:
                    row["lre_overflow"] = timed_build(laptop, ws_lre, no_cache, all_remote(ws_lre))
                    counters = upstream_counters(lre.http_stats(), "forward")
                    forwarded.append(counters.get("forwarded_overflow", 0))
                    assert counters.get("fell_back_local", 0) == 0, counters
                for name, value in row.items():
                    times.setdefault(name, []).append(value)
                say(
                    f"round {rep + 1}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in row.items())
                    + f"; upstream AC hits {hits}; forwarded {forwarded[-1]}"
                )
    finally:
        grid.stop()
        shutil.rmtree(top, ignore_errors=True)

    medians = {name: statistics.median(values) for name, values in times.items()}
    say("")
    for name, values in times.items():
        say(f"{name:18s} median {medians[name]:6.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    ratios = {
        "lre_cached_empty / straight_cached": medians["lre_cached_empty"]
        / medians["straight_cached"],
        "lre_cached_second / straight_cached": medians["lre_cached_second"]
        / medians["straight_cached"],
        "lre_overflow / lre_local_only": medians["lre_overflow"] / medians["lre_local_only"],
    }
    for name, ratio in ratios.items():
        say(f"{name}: {ratio:.2f}x")
    say(f"forwarded per overflow build: {forwarded} of {ws_lre.spawn_count}")
    if args.out is not None:
        summary: dict[str, Any] = {
            "times": times,
            "medians": medians,
            "ratios": ratios,
            "forwarded": forwarded,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
