"""What happened in my build, asked of a real lre after a real Bazel build.

A clean build runs every action on lre, a second build after ``bazel clean``
is served by GetActionResult; then ``lre builds``, ``builds show``,
``history``, ``trace`` and ``report`` (rendered in headless Chromium) must
tell both builds apart and name the targets, and after ``lre down`` and
``lre up`` the history is still there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from lre.cli._bazel_client import repository_id
from tests._support.chromium import render_dom
from tests._support.configs import app_config_text
from tests._support.processes import require_tool
from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.cli.test_report_page import _Actions
from tests.cli.test_trace_file import check_trace_format
from tests.e2e._bazel import BazelSession, require_bazel
from tests.e2e._workspace import generate_workspace

pytestmark = [pytest.mark.slow, pytest.mark.bazel]


def test_builds_history_trace_and_report_of_real_bazel_builds(tmp_path: Path) -> None:
    require_bazel()
    chromium = require_tool("chromium")
    ws = generate_workspace(tmp_path / "ws", modules=6)
    root = tmp_path / "lre-root"
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            root,
            status_port=free_port(),
            max_inflight=4,
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home"), "COLUMNS": "200"}

    def lre(*args: str) -> str:
        done = run_lre(*args, "--config", str(config), cwd=ws.root, env=env)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def as_json(*args: str) -> Any:
        return json.loads(lre(*args, "--json"))

    port = str(free_port())
    lre("up", "--detach", "--port", port, "--repo", str(ws.root))
    try:
        with BazelSession(ws.root, tmp_path / "bazel-root") as bazel:
            assert bazel.build([ws.target], ["--noremote_accept_cached"]).check().spawns
            bazel.clean()
            assert bazel.build([ws.target]).check().count("remote cache hit") == ws.spawn_count
        lre("down")  # writes what is buffered; the history survives the restart
        lre("up", "--detach", "--port", port, "--repo", str(ws.root))

        built, cached = as_json("builds")
        assert built["client"].startswith("bazel") and built["instance"] == "main"
        assert built["invocation"] != cached["invocation"]
        assert built["executed"] == ws.spawn_count and built["failed"] == 0
        assert cached["executed"] == 0
        assert cached["cache_hits"]["get_action_result"] == ws.spawn_count
        # The cached build made no Execute call, yet names its repository:
        # lre.bazelrc sends the header on every call.
        assert built["repository"] == cached["repository"] == repository_id(ws.root)
        assert [b["invocation"] for b in as_json("builds", "--repo", "ws-*")] == [
            built["invocation"],
            cached["invocation"],
        ]

        shown = as_json("builds", "show", built["invocation"][:8])
        assert shown["invocation"] == built["invocation"]
        for key in ("killed", "retried", "frozen", "not_run"):
            assert shown[key] == 0, key
        assert shown["cache_hits"] == {"execute": 0, "get_action_result": 0}
        assert 0 <= shown["queue_wait_s"]["p50"] <= shown["queue_wait_s"]["p95"]
        assert shown["lre_per_action_s"] > 0 and shown["peak_rss_bytes"] > 0
        targets = {f"//:{m.name}" for m in ws.modules} | {"//:app"}
        assert {s["target"] for s in shown["slowest"]} <= targets
        assert as_json("builds", "show", "last")["invocation"] == cached["invocation"]

        app = as_json("history", "--target", "//:app")
        assert {(r["mnemonic"], r["source"]) for r in app} == {
            ("CppCompile", "executed"),
            ("CppLink", "executed"),
            ("CppCompile", "lookup_hit"),
            ("CppLink", "lookup_hit"),
        }
        for record in app:
            if record["source"] == "executed":
                assert list(record["phases_s"]) == ["queued", "staging", "running", "storing"]
                assert record["exit_code"] == 0 and record["reserved_millicpus"] == 1000
        table = lre("history", "-n", "100")
        assert "//:mod_00" in table and "CppCompile" in table

        trace_file = tmp_path / "trace.json"
        lre("trace", built["invocation"], "-o", str(trace_file))
        events = check_trace_format(json.loads(trace_file.read_text()))
        actions = [e for e in events if e["ph"] == "X" and e["cat"] != "phase"]
        assert sorted(e["name"] for e in actions) == sorted(
            [*targets, "//:app"]  # //:app compiles and links
        )

        page = tmp_path / "report.html"
        lre("report", built["invocation"], "-o", str(page))
        dom, log = render_dom(chromium, page, tmp_path / "profile")
        assert [line for line in log.splitlines() if ":CONSOLE" in line] == []
        parsed = _Actions()
        parsed.feed(dom)
        assert parsed.external == []
        assert sorted(a["target"] for a in parsed.actions) == sorted([*targets, "//:app"])
        assert all(a["target"] in a["text"] for a in parsed.actions)
    finally:
        run_lre("down", "--config", str(config), cwd=ws.root, env=env)
