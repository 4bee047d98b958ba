"""A real Bazel building a C workspace through a real ``lre up --detach``.

What a user does: ``lre up`` in the repo (it writes lre.bazelrc and the
try-import line), then ``bazel build``. Every spawn must run remotely, the
binary must print what the model (and a local build) prints, and after
``bazel clean`` a second build must be served entirely from lre's cache.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests._support.configs import app_config_text
from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.e2e._bazel import BazelSession, require_bazel
from tests.e2e._workspace import generate_workspace

pytestmark = [pytest.mark.slow, pytest.mark.bazel]


def _stats(status_port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{status_port}/api/v1/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        data: dict[str, Any] = json.loads(reply.read())
        return data


class Scraper(threading.Thread):
    """Polls /status and /metrics while a build runs, as a monitoring agent would."""

    def __init__(self, status_port: int) -> None:
        super().__init__(daemon=True)
        self.base = f"http://127.0.0.1:{status_port}"
        self.stop = threading.Event()
        self.scrapes = 0
        self.max_running = 0.0
        self.errors: list[str] = []
        self.label_values: set[str] = set()

    def run(self) -> None:
        while not self.stop.wait(0.3):
            try:
                with urllib.request.urlopen(self.base + "/status", timeout=5) as reply:
                    if reply.status != 200:
                        self.errors.append(f"/status {reply.status}")
                with urllib.request.urlopen(self.base + "/metrics", timeout=5) as reply:
                    text = reply.read().decode()
                for family in text_string_to_metric_families(text):
                    for sample in family.samples:
                        self.label_values.update(sample.labels.values())
                        if sample.name == "lre_running_actions":
                            self.max_running = max(self.max_running, sample.value)
                self.scrapes += 1
            except Exception as error:  # recorded and asserted on below
                self.errors.append(repr(error))


def test_bazel_builds_remotely_through_lre_then_from_its_cache(tmp_path: Path) -> None:
    require_bazel()
    ws = generate_workspace(tmp_path / "ws")
    assert len(ws.modules) >= 20
    root = tmp_path / "lre-root"
    config = tmp_path / "lre.json5"
    status_port = free_port()
    config.write_text(
        app_config_text(
            root,
            status_port=status_port,
            max_inflight=4,
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    port = free_port()
    up = run_lre(
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
            scraper = Scraper(status_port)
            scraper.start()
            try:
                built = bazel.build([ws.target], ["--noremote_accept_cached"])
            finally:
                scraper.stop.set()
                scraper.join(10)
            assert not scraper.errors, scraper.errors[:5]
            assert scraper.scrapes >= 3
            assert scraper.max_running >= 1  # the scrape saw the build in flight
            # Bounded cardinality: no digest or operation id ever becomes a label.
            digest_like = [v for v in scraper.label_values if re.search(r"[0-9a-f]{32}", v)]
            assert not digest_like, digest_like[:5]
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
        down = run_lre("down", "--config", str(config), cwd=ws.root, env=env)
        log = root / "state" / "lre.log"
        if down.returncode != 0 and log.exists():
            print(log.read_text()[-5000:])
    assert down.returncode == 0, down.stderr
