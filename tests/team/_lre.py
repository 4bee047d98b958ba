"""``lre up --detach`` with the shipped configs/team-cache.json5 in front of a
BuildGrid, as a user runs it, and lre's statistics over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from tests._support.servers import free_port
from tests.team._buildgrid import INSTANCE, REPO, BuildGrid

TEAM_CONFIG = REPO / "configs" / "team-cache.json5"


class TeamLre:
    """A detached lre using ``TEAM_CONFIG`` against ``grid``; a context manager
    whose exit runs ``lre down`` (and fails with lre's log tail if that fails)."""

    def __init__(
        self,
        root: Path,
        grid: BuildGrid,
        repo: Path,
        *,
        overflow_queue_depth: int = 0,
        ports: tuple[int, int] | None = None,
    ) -> None:
        """``ports``: (gRPC, status) to use instead of free ones (a Bazel
        server keeps its analysis cache only while lre.bazelrc is unchanged)."""
        self.root = root
        self.repo = repo
        self.port, self.status_port = ports or (free_port(), free_port())
        self.env = {
            **os.environ,
            "HOME": str(root / "home"),
            "LRE_HOME": str(root / "lre"),
            "LRE_UPSTREAM": grid.url,
            "LRE_UPSTREAM_INSTANCE": INSTANCE,
            "LRE_UPSTREAM_TOKEN": "",
            "LRE_OVERFLOW_QUEUE_DEPTH": str(overflow_queue_depth),
            "LRE_STATUS_ADDRESS": f"127.0.0.1:{self.status_port}",
        }

    def _lre(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lre", *args],
            cwd=self.repo,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def log_tail(self, chars: int = 6000) -> str:
        log = self.root / "lre" / "state" / "lre.log"
        candidates = [log, *sorted((self.root / "lre").rglob("lre.log"))]
        for path in candidates:
            if path.exists():
                return path.read_text(errors="replace")[-chars:]
        return "(no lre.log)"

    def __enter__(self) -> TeamLre:
        up = self._lre(
            "up",
            "--detach",
            "--config",
            str(TEAM_CONFIG),
            "--port",
            str(self.port),
            "--repo",
            str(self.repo),
        )
        assert up.returncode == 0, up.stdout + up.stderr + self.log_tail()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        down = self._lre("down", "--config", str(TEAM_CONFIG))
        assert down.returncode == 0, down.stdout + down.stderr + self.log_tail()

    def stats(self) -> dict[str, Any]:
        """``lre stats --json``: the snapshot, upstream rows included."""
        proc = self._lre("stats", "--json", "--address", f"127.0.0.1:{self.status_port}")
        assert proc.returncode == 0, proc.stderr
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    def http_stats(self) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.status_port}/api/v1/stats"
        with urllib.request.urlopen(url, timeout=10) as reply:
            data: dict[str, Any] = json.loads(reply.read())
            return data

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.status_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            return str(reply.read().decode())


def upstream_counters(stats: dict[str, Any], name: str) -> dict[str, int]:
    """The counters of upstream row ``name`` (e.g. "forward", "upstream-ac")."""
    for row in stats.get("upstreams", ()):
        if row["name"] == name:
            counters: dict[str, int] = row["counters"]
            return counters
    raise AssertionError(f"no upstream row {name!r} in {stats.get('upstreams')}")


def upstream_row(stats: dict[str, Any], name: str) -> dict[str, Any]:
    for row in stats.get("upstreams", ()):
        if row["name"] == name:
            found: dict[str, Any] = row
            return found
    raise AssertionError(f"no upstream row {name!r} in {stats.get('upstreams')}")
