"""A real Bazel (Debian's 4.2.3, default retries) building an action that
passes lre's hard memory ceiling: it runs once, and Bazel's error output
carries lre's explanation (the peak, the ceiling and how it was worked out,
the setting that raises it).

RESOURCE_EXHAUSTED, which lre answered such a kill with before, is a status
Bazel retries (``--remote_retries``, 5 by default): the action then ran six
times, six memory spikes in a row, and the message named a digest only.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests._support.chromium import drawn_marks, render_dom
from tests._support.configs import app_config_text
from tests._support.processes import require_tool
from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.e2e._bazel import BazelSession, require_bazel
from tests.e2e._workspace import write_offline_scaffold

pytestmark = [pytest.mark.slow, pytest.mark.bazel]

#: Grows to 400 MiB, 8 MiB at a time, then waits (lre kills it first).
HOG = """\
import sys, time
print("hog: starting", file=sys.stderr, flush=True)
chunks = []
while len(chunks) < 50:
    b = bytearray(8 << 20); b[::4096] = b"x" * len(b[::4096]); chunks.append(b)
    time.sleep(0.02)
time.sleep(120)
"""


def _stats(status_port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{status_port}/api/v1/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        data: dict[str, Any] = json.loads(reply.read())
        return data


def test_bazel_runs_an_action_over_the_ceiling_once_and_shows_why(tmp_path: Path) -> None:
    require_bazel()
    ws = tmp_path / "ws"
    write_offline_scaffold(ws, "doomed")
    (ws / "hog.py").write_text(HOG)
    (ws / "BUILD").write_text(
        'genrule(name = "hog", srcs = ["hog.py"], outs = ["hog.txt"], '
        'cmd = "python3 $(location hog.py) > $@")\n'
    )
    status_port = free_port()
    config = tmp_path / "lre.json5"
    # Budget 256 MiB, kill_factor 1.2 (the default): the ceiling is 307.2 MiB.
    config.write_text(
        app_config_text(
            tmp_path / "lre-root",
            status_port=status_port,
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        ).replace('memory_budget: "2GiB"', 'memory_budget: "256MiB"')
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    up = run_lre("up", "--detach", "--config", str(config), cwd=ws, env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        with BazelSession(ws, tmp_path / "bazel") as bazel:
            built = bazel.build(["//:hog"])
        output = built.output
        assert built.returncode != 0, output
        assert "//:hog failed: (Killed)" in output, output[-4000:]  # exit code 137
        assert "hog: starting" in output, output[-4000:]  # the action's own stderr
        assert "lre: killed this action (exit code 137, SIGKILL)" in output, output[-4000:]
        assert "over the hard ceiling of 307.2 MiB = the memory budget 256 MiB" in output
        assert "x kill_factor 1.2" in output
        assert "lre up --memory-budget SIZE" in output
        assert "workers[].local.resources.memory_budget" in output
        assert "not run again after 1 kill(s)" in output  # lre's message beside the result
        stats = _stats(status_port)
        # One Execute, one run: Bazel did not send it again, lre did not requeue it.
        assert stats["completions"] == {"nonzero_exit": 1}, stats["completions"]
        assert stats["ladder_kills"] == 1, stats
        assert stats["ladder_requeues"] == 0, stats  # not run again by lre either
        deadline = time.monotonic() + 60
        while True:  # the history is written once a second
            history = run_lre("history", "--json", "--config", str(config), cwd=ws, env=env)
            assert history.returncode == 0, history.stderr
            records = json.loads(history.stdout)
            if records or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [r["target"] for r in records] == ["//:hog"], records
        (hog,) = records
        assert hog["exit_code"] == 137 and hog["kills"] == 1 and hog["attempts"] == 1, hog
        assert hog["phases_s"].get("running", 0) > 0, hog  # the killed run has its time
        assert hog["killed_for_good"] and hog["memory_retries"] == 0, hog
        assert "ceiling" in hog["kill_reason"], hog
        shown = run_lre("builds", "show", "last", "--config", str(config), cwd=ws, env=env)
        assert "killed     1 for their memory (lre ran 0 of them again" in shown.stdout
        assert "gave up" in shown.stdout, shown.stdout
        page = tmp_path / "report.html"
        report = run_lre(
            "report", "last", "-o", str(page), "--config", str(config), cwd=ws, env=env
        )
        assert report.returncode == 0, report.stderr
        dom, _ = render_dom(require_tool("chromium"), page, tmp_path / "profile")
        marks = drawn_marks(dom)
        assert (marks["kill-marks"], marks["kill-lines"], marks["cancel-marks"]) == (1, 1, 0)
        assert marks["running"] >= 1  # the killed run is drawn with its running part
        assert 'data-outcome="killed"' in dom
    finally:
        down = run_lre("down", "--now", "--config", str(config), cwd=ws, env=env)
        if down.returncode != 0:
            down = run_lre("down", "--config", str(config), cwd=ws, env=env)
    assert down.returncode == 0, down.stderr
