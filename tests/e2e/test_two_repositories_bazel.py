"""Two repositories building at once through one lre, with a real Bazel.

Each build is told apart by its repository in ``lre builds`` (and ``--json``),
``lre history --repo``, ``/status`` while it runs (a line per running build),
and the trace; each build's duration is what Bazel itself printed ("Elapsed
time") but for the moment before Bazel's first call (within a second on a
quiet machine); and ``lre builds --json`` run the moment Bazel returns counts
every action Bazel ran remotely.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lre.cli._bazel_client import repository_id
from tests._support.configs import app_config_text
from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.e2e._bazel import BazelSession, BuildResult, require_bazel
from tests.e2e._workspace import generate_workspace

pytestmark = [pytest.mark.slow, pytest.mark.bazel]

_ELAPSED = re.compile(r"Elapsed time: ([0-9.]+)s")


def test_two_repositories_at_once_each_with_its_repository_and_bazels_duration(
    tmp_path: Path,
) -> None:
    require_bazel()
    first = generate_workspace(tmp_path / "first", modules=4, funcs=1, seed=11)
    second = generate_workspace(tmp_path / "second", modules=3, funcs=1, seed=12)
    status_port = free_port()
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            tmp_path / "lre-root",
            status_port=status_port,
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home"), "COLUMNS": "200"}

    def lre(*args: str, cwd: Path = first.root) -> str:
        done = run_lre(*args, "--config", str(config), cwd=cwd, env=env)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def as_json(*args: str) -> Any:
        return json.loads(lre(*args, "--json"))

    lre("up", "--detach", "--port", str(free_port()))
    try:
        lre("link", cwd=second.root)
        results: dict[str, BuildResult] = {}
        seen_at_once: list[set[str]] = []

        def run_build(name: str, root: Path, target: str) -> None:
            with BazelSession(root, tmp_path / f"bazel-{name}") as bazel:
                # The server's start is in Bazel's time, before any call to lre.
                assert bazel.run("info", "release").returncode == 0
                results[name] = bazel.build([target], ["--noremote_accept_cached"])

        threads = [
            threading.Thread(target=run_build, args=("first", first.root, first.target)),
            threading.Thread(target=run_build, args=("second", second.root, second.target)),
        ]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/status") as reply:
                lines = json.loads(reply.read())["builds"]
            running = [b["repository"] for b in lines if b["running"]]
            assert len(running) == len({b["invocation"] for b in lines if b["running"]})
            seen_at_once.append(set(running))
            time.sleep(0.3)
        for thread in threads:
            thread.join()
        builds = {b["repository"]: b for b in as_json("builds")}  # right after Bazel returned
        names = {"first": repository_id(first.root), "second": repository_id(second.root)}
        assert set(builds) == set(names.values()), builds
        # /status named each while it ran (at once when their calls overlapped)
        assert set(names.values()) <= set().union(*seen_at_once), seen_at_once
        for name, ws in (("first", first), ("second", second)):
            result = results[name]
            assert result.check().count("remote") == ws.spawn_count
            summary = builds[names[name]]
            assert summary["executed"] == ws.spawn_count, summary
            bazel_s = float(_ELAPSED.findall(result.output)[-1])
            # lre sees Bazel's first call (capabilities, as the command starts)
            # to its last download; the option parsing before it is Bazel's
            # alone (a second on two busy cores, two builds at once).
            assert -0.5 <= bazel_s - summary["duration_s"] <= 2.0, (summary, bazel_s)
            mine = as_json("history", "--repo", names[name], "-n", "0")
            assert len(mine) == ws.spawn_count
            assert {r["invocation"] for r in mine} == {summary["invocation"]}
        table = lre("builds").splitlines()
        assert table[0].split()[:2] == ["build", "repo"]
        assert {row.split()[1] for row in table[1:3]} == set(names.values())
        trace = tmp_path / "trace.json"
        lre("trace", builds[names["second"]]["invocation"], "-o", str(trace))
        assert json.loads(trace.read_text())["otherData"]["repository"] == names["second"]
    finally:
        run_lre("down", "--config", str(config), cwd=first.root, env=env)
