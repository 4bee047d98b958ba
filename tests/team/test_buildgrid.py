"""lre in front of a real BuildGrid 0.4.4 (an engine lre did not write), with
the shipped configs/team-cache.json5, the lre.bazelrc that `lre up` writes and
a real Bazel building a generated C workspace.

1. A build straight against BuildGrid (the team's CI, with the repository's
   flags only) fills its cache; the same sources built through lre with
   configs/team-cache.json5 get only remote cache hits.
2. With cache lookups off the build through lre runs everything on the
   laptop and forwards nothing.
3. With overflow forwarding on, some actions run on BuildGrid (lre's
   statistics count them) and the program prints what the model says.
4. An action asking for a property no local worker offers (ISA) is forwarded
   and completes on BuildGrid, whose worker offers it.
5. BuildGrid killed in the middle of an overflow build: the build still
   completes, locally.

BuildGrid is shared by the tests (session fixture); test 5 kills it, so it
comes last and the fixture restarts it for anyone after.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._bazel import BazelSession, BuildResult, require_bazel
from tests.e2e._workspace import Workspace, generate_workspace
from tests.team._buildgrid import BuildGrid, straight_flags
from tests.team._lre import TeamLre, upstream_counters, upstream_row

pytestmark = [pytest.mark.slow, pytest.mark.bazel]

MODULES = 8


def workspace(tmp_path: Path, **kwargs: object) -> Workspace:
    require_bazel()
    return generate_workspace(tmp_path / "ws", modules=MODULES, funcs=2, **kwargs)  # type: ignore[arg-type]


@contextlib.contextmanager
def laptop(
    tmp_path: Path, grid: BuildGrid, ws: Workspace, *, overflow_queue_depth: int = 0
) -> Iterator[tuple[BazelSession, TeamLre]]:
    """A Bazel session on ``ws`` and an lre (team config) in front of ``grid``."""
    with (
        BazelSession(ws.root, tmp_path / "bazel-root") as bazel,
        TeamLre(
            tmp_path / "laptop", grid, ws.root, overflow_queue_depth=overflow_queue_depth
        ) as lre,
    ):
        yield bazel, lre


def check_output(ws: Workspace) -> None:
    out = subprocess.run([ws.binary, "100"], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == ws.expected_checksum(100)


def checked(built: BuildResult, lre: TeamLre) -> None:
    if built.returncode != 0:
        print(lre.log_tail())
    built.check()


def test_team_ci_fills_the_cache_and_lre_gets_only_hits(
    tmp_path: Path, running_buildgrid: BuildGrid
) -> None:
    grid = running_buildgrid
    ws = workspace(tmp_path)
    with BazelSession(ws.root, tmp_path / "bazel-root") as bazel:
        ci = bazel.build([ws.target], [*straight_flags(grid.url), "--noremote_accept_cached"])
        summary = ci.check()
        assert summary.count("remote") == ws.spawn_count, (summary, grid.log_tail())
        bazel.clean()
        with TeamLre(tmp_path / "laptop", grid, ws.root) as lre:
            bazelrc = (ws.root / "lre.bazelrc").read_text()
            # Nothing in it changes an action's key: no platform, no action env.
            assert "platform_properties" not in bazelrc, bazelrc
            assert "exec_properties" not in bazelrc, bazelrc
            assert "strict_action_env" not in bazelrc, bazelrc
            built = bazel.build([ws.target])
            checked(built, lre)
            cached = built.check()
            assert cached.count("remote cache hit") == ws.spawn_count, cached
            check_output(ws)
            stats = lre.stats()
            ac = upstream_counters(stats, "upstream-ac")
            assert ac.get("ac_hits", 0) >= ws.spawn_count, ac
            assert upstream_row(stats, "upstream-ac")["state"] == "up"
            assert upstream_counters(stats, "upstream-cas").get("read_bytes", 0) > 0
            forward = upstream_counters(stats, "forward")
            assert not any(k.startswith("forwarded_") and v for k, v in forward.items()), forward
            assert stats["completions"].get("success", 0) == 0  # nothing ran on the laptop
            metrics = lre.metrics()
            assert 'lre_upstream_events_total{upstream="upstream-ac",counter="ac_hits"}' in metrics


def test_cache_lookups_off_runs_locally_and_forwards_nothing(
    tmp_path: Path, running_buildgrid: BuildGrid
) -> None:
    ws = workspace(tmp_path)
    with laptop(tmp_path, running_buildgrid, ws) as (bazel, lre):
        built = bazel.build([ws.target], ["--noremote_accept_cached"])
        checked(built, lre)
        assert built.check().count("remote") == ws.spawn_count
        check_output(ws)
        stats = lre.stats()
        assert stats["completions"].get("success", 0) == ws.spawn_count, stats["completions"]
        forward = upstream_counters(stats, "forward")
        assert forward.get("forwarded_overflow", 0) == 0, forward
        assert forward.get("forwarded_unsatisfiable", 0) == 0, forward
        assert forward.get("fell_back_local", 0) == 0, forward


def test_overflow_runs_some_actions_on_buildgrid(
    tmp_path: Path, running_buildgrid: BuildGrid
) -> None:
    ws = workspace(tmp_path)
    with laptop(tmp_path, running_buildgrid, ws, overflow_queue_depth=1) as (bazel, lre):
        built = bazel.build([ws.target], ["--noremote_accept_cached"])
        checked(built, lre)
        check_output(ws)
        stats = lre.stats()
        forward = upstream_counters(stats, "forward")
        forwarded = forward.get("forwarded_overflow", 0)
        assert forwarded >= 1, forward
        assert forward.get("completed_upstream", 0) == forwarded, forward
        assert forward.get("fell_back_local", 0) == 0, (forward, lre.log_tail())
        local = stats["completions"].get("success", 0)
        assert local + forwarded == ws.spawn_count, (local, forward)
        assert upstream_row(stats, "forward")["state"] == "up"


def test_action_no_local_worker_can_run_completes_on_buildgrid(
    tmp_path: Path, running_buildgrid: BuildGrid
) -> None:
    # BuildGrid's worker offers ISA=x86-64; the laptop's worker offers no ISA.
    ws = workspace(tmp_path, first_module_exec_properties={"ISA": "x86-64"})
    with laptop(tmp_path, running_buildgrid, ws) as (bazel, lre):
        built = bazel.build([ws.target], ["--noremote_accept_cached"])
        checked(built, lre)
        check_output(ws)
        stats = lre.stats()
        forward = upstream_counters(stats, "forward")
        assert forward.get("forwarded_unsatisfiable", 0) == 1, forward  # mod_00's compile
        assert forward.get("completed_upstream", 0) == 1, forward
        assert forward.get("forwarded_overflow", 0) == 0, forward
        assert stats["completions"].get("success", 0) == ws.spawn_count - 1


def test_buildgrid_killed_mid_build_the_build_completes_locally(
    tmp_path: Path, running_buildgrid: BuildGrid
) -> None:
    grid = running_buildgrid
    ws = workspace(tmp_path)
    with laptop(tmp_path, grid, ws, overflow_queue_depth=1) as (bazel, lre):
        result: list[BuildResult] = []
        builder = threading.Thread(
            target=lambda: result.append(bazel.build([ws.target], ["--noremote_accept_cached"]))
        )
        builder.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and builder.is_alive():
            counters = upstream_counters(lre.http_stats(), "forward")
            if counters.get("forwarded_overflow", 0) >= 1:
                break
            time.sleep(0.05)
        grid.kill_server()
        builder.join(600)
        assert not builder.is_alive()
        checked(result[0], lre)
        check_output(ws)
        stats = lre.stats()
        forward = upstream_counters(stats, "forward")
        assert forward.get("forwarded_overflow", 0) >= 1, forward
        assert forward.get("fell_back_local", 0) >= 1, (forward, lre.log_tail())
        # Whichever client met the dead server first (uploads or Execute) shows it.
        states = {row["name"]: row["state"] for row in stats["upstreams"]}
        assert "down" in states.values(), states
        log = lre.log_tail(200_000)
        # Logged once per cause, however many actions fell back.
        assert log.count("did not run a forwarded action") <= len(
            [k for k in forward if k.startswith("fallback_")]
        ), log[-3000:]
