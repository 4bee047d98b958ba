"""Drive a real Bazel (Debian's bazel-bootstrap 4.2.3) from tests and read its summary.

``BazelSession`` keeps all of Bazel's state under a directory the test owns
(``--output_user_root``), never reads the user's ``~/.bazelrc``, and on exit
runs ``bazel shutdown`` and makes sure the server process is gone, so nothing
outlives the test. ``parse_process_summary`` reads Bazel's
"INFO: N processes: X internal, Y remote." line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

#: Kinds of spawn that ran on this machine (names Bazel 4 prints in its summary).
LOCAL_KINDS = frozenset(
    {"local", "linux-sandbox", "processwrapper-sandbox", "sandbox", "worker", "darwin-sandbox"}
)

_SUMMARY = re.compile(r"^INFO: (\d+) process(?:es)?(?:: (.*?))?\.\s*$", re.MULTILINE)
_KIND = re.compile(r"^(\d+) (.+)$")


@dataclass(frozen=True)
class ProcessSummary:
    """Bazel's count of processes by kind, e.g. {"internal": 84, "remote": 122}."""

    total: int
    kinds: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> int:
        return self.kinds.get(kind, 0)

    @property
    def spawns(self) -> int:
        """Processes that were not Bazel-internal bookkeeping."""
        return self.total - self.count("internal")

    @property
    def local(self) -> int:
        return sum(n for kind, n in self.kinds.items() if kind in LOCAL_KINDS)


def parse_process_summary(output: str) -> ProcessSummary | None:
    """The last process summary in Bazel's output, or None when there is none.

    Raises ValueError when a summary line is there but its kinds do not add up
    to its total (a format this parser does not understand).
    """
    matches = list(_SUMMARY.finditer(output))
    if not matches:
        return None
    total_text, detail = matches[-1].group(1), matches[-1].group(2)
    total = int(total_text)
    kinds: dict[str, int] = {}
    if detail:
        for part in detail.split(","):
            m = _KIND.match(part.strip())
            if m is None:
                raise ValueError(f"process summary part {part.strip()!r} is not 'N kind'")
            kinds[m.group(2)] = kinds.get(m.group(2), 0) + int(m.group(1))
    if kinds and sum(kinds.values()) != total:
        raise ValueError(f"process summary {matches[-1].group(0)!r}: kinds do not add up")
    return ProcessSummary(total=total, kinds=kinds)


@dataclass(frozen=True)
class BuildResult:
    returncode: int
    output: str
    summary: ProcessSummary | None

    def check(self) -> ProcessSummary:
        """The summary of a successful build; fails the test with Bazel's log tail otherwise."""
        tail = "\n".join(self.output.splitlines()[-40:])
        assert self.returncode == 0, f"bazel exited {self.returncode}:\n{tail}"
        assert self.summary is not None, f"no process summary in bazel output:\n{tail}"
        return self.summary


def read_execution_log(path: Path) -> list[dict[str, Any]]:
    """Spawns from ``--execution_log_json_file`` (a stream of JSON objects, one per spawn).

    Each has ``mnemonic``, ``runner`` ("remote", "linux-sandbox", ...),
    ``remoteCacheHit`` and ``platform.properties`` (the exec_properties sent).
    """
    text = path.read_text()
    decoder = json.JSONDecoder()
    spawns: list[dict[str, Any]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return spawns
        obj, pos = decoder.raw_decode(text, pos)
        spawns.append(obj)


def platform_properties(spawn: dict[str, Any]) -> dict[str, str]:
    """A logged spawn's platform properties as a dict."""
    props = spawn.get("platform", {}).get("properties", [])
    return {p["name"]: p.get("value", "") for p in props}


def require_bazel() -> str:
    """Path of ``bazel``; skips the test when missing (a failure under CI)."""
    path = shutil.which("bazel")
    if path is None:
        pytest.skip("bazel is not installed (Debian: apt-get install bazel-bootstrap)")
    return path


def bazel_package_version() -> str | None:
    """Debian's package version of bazel-bootstrap (``bazel version`` says nothing there)."""
    dpkg = shutil.which("dpkg-query")
    if dpkg is None:
        return None
    proc = subprocess.run(
        [dpkg, "-W", "-f=${Version}", "bazel-bootstrap"], capture_output=True, text=True
    )
    return proc.stdout.strip() or None


class BazelSession:
    """One Bazel server for one workspace, with all state under ``output_user_root``.

    Use as a context manager; leaving it shuts the server down and fails (after
    killing it) if the server process is still alive.
    """

    def __init__(
        self,
        workspace: Path,
        output_user_root: Path,
        *,
        max_idle_secs: int = 300,
        timeout: float = 600,
        home: Path | None = None,
    ) -> None:
        """``home``: read that directory's ``.bazelrc`` (HOME set to it) rather
        than no home rc at all, for a repository that reads lre.bazelrc
        through the user's own file."""
        self.workspace = workspace
        self._env = None if home is None else {**os.environ, "HOME": str(home)}
        self.output_user_root = output_user_root
        self.timeout = timeout
        self._bazel = require_bazel()
        self._startup = [
            "--nohome_rc" if home is None else "--home_rc",
            f"--output_user_root={output_user_root}",
            # Belt and braces: even a killed test leaves no server beyond this.
            f"--max_idle_secs={max_idle_secs}",
        ]
        output_user_root.mkdir(parents=True, exist_ok=True)

    def run(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``bazel <startup> ARGS`` in the workspace; output is stderr+stdout together."""
        return subprocess.run(
            [self._bazel, *self._startup, *args],
            cwd=self.workspace,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout or self.timeout,
        )

    def build(self, targets: Sequence[str], flags: Sequence[str] = ()) -> BuildResult:
        proc = self.run("build", *flags, *targets)
        return BuildResult(
            returncode=proc.returncode,
            output=proc.stdout,
            summary=parse_process_summary(proc.stdout),
        )

    def clean(self) -> None:
        proc = self.run("clean")
        assert proc.returncode == 0, proc.stdout

    def server_pids(self) -> list[int]:
        """Pids of live Bazel servers under this session's output_user_root."""
        pids = []
        for pid_file in self.output_user_root.glob("*/server/server.pid.txt"):
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, 0)
            except (ValueError, OSError):
                continue
            pids.append(pid)
        return pids

    def shutdown(self) -> None:
        """``bazel shutdown``; then kills any server of this session still alive.

        Raises AssertionError naming the pids when a server had to be killed.
        """
        pids_before = self.server_pids()
        if pids_before:
            self.run("shutdown", timeout=120)
        deadline = time.monotonic() + 10
        while self.server_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = self.server_pids()
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        assert not survivors, f"bazel server(s) {survivors} survived `bazel shutdown`"

    def __enter__(self) -> BazelSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()
