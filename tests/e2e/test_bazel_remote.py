"""A real Bazel building a C workspace through a real ``lre up --detach``.

What a user does: ``lre up`` in the repo (it writes lre.bazelrc and the
try-import line), then ``bazel build``. Every spawn must run remotely, the
binary must print what the model (and a local build) prints, and after
``bazel clean`` a second build must be served entirely from lre's cache.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.app.conftest import app_config_text
from tests.e2e._bazel import BazelSession, require_bazel
from tests.e2e._workspace import generate_workspace

pytestmark = [pytest.mark.slow, pytest.mark.bazel]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _lre(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lre", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _stats(status_port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{status_port}/api/v1/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        data: dict[str, Any] = json.loads(reply.read())
        return data


def test_bazel_builds_remotely_through_lre_then_from_its_cache(tmp_path: Path) -> None:
    require_bazel()
    ws = generate_workspace(tmp_path / "ws")
    assert len(ws.modules) >= 20
    root = tmp_path / "lre-root"
    config = tmp_path / "lre.json5"
    status_port = _free_port()
    config.write_text(
        app_config_text(
            root,
            status_port=status_port,
            max_inflight=4,
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    port = _free_port()
    up = _lre(
        "up",
        "--detach",
        "--config",
        str(config),
        "--port",
        str(port),
        "--repo",
        str(ws.root),
        cwd=ws.root,
        env=env,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        assert f"grpc://127.0.0.1:{port}" in (ws.root / "lre.bazelrc").read_text()
        with BazelSession(ws.root, tmp_path / "bazel-root") as bazel:
            built = bazel.build([ws.target], ["--noremote_accept_cached"])
            summary = built.check()
            assert summary.spawns == ws.spawn_count, built.output[-3000:]
            assert summary.count("remote") == ws.spawn_count, summary
            stats = _stats(status_port)
            ran = stats["completions"].get("success", 0)
            assert ran == ws.spawn_count, stats["completions"]

            out = subprocess.run(
                [ws.binary, "100"], capture_output=True, text=True, check=True, timeout=60
            )
            assert out.stdout.strip() == ws.expected_checksum(100)

            bazel.clean()
            cached = bazel.build([ws.target]).check()
            assert cached.count("remote cache hit") == ws.spawn_count, cached
            assert cached.spawns == ws.spawn_count, cached
            again = subprocess.run(
                [ws.binary, "100"], capture_output=True, text=True, check=True, timeout=60
            )
            assert again.stdout == out.stdout
            after = _stats(status_port)
            assert after["completions"].get("success", 0) == ran  # nothing ran again
    finally:
        down = _lre("down", "--config", str(config), cwd=ws.root, env=env)
        log = root / "state" / "lre.log"
        if down.returncode != 0 and log.exists():
            print(log.read_text()[-5000:])
    assert down.returncode == 0, down.stderr
