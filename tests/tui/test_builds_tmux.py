"""Two builds at once in ``lre top``, in a tmux pane at 80 and 120 columns,
against a real ``lre up --detach``: a header line per running build, each
naming its repository, and once both ended one "last build" line, not two
builds still "running"."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from lre.proto import REQUEST_METADATA_KEY, re_pb2
from tests._support.ci import in_ci
from tests._support.reapi import Client
from tests.cli.running_lre import bazel_repo, detached, private_home

REPO = Path(__file__).resolve().parents[2]


def _metadata(invocation: str, repository: str) -> list[tuple[str, str | bytes]]:
    info = re_pb2.RequestMetadata(
        tool_details=re_pb2.ToolDetails(tool_name="bazel", tool_version="4.2.3"),
        tool_invocation_id=invocation,
        action_mnemonic="Genrule",
        target_id=f"//{repository}:gen",
    )
    return [(REQUEST_METADATA_KEY, info.SerializeToString()), ("x-lre-repository", repository)]


def _tmux(socket: Path, *args: str) -> str:
    done = subprocess.run(
        ["tmux", "-S", str(socket), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _screen_until(socket: Path, wanted: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux(socket, "capture-pane", "-p", "-t", "top")
        if wanted in screen:
            time.sleep(0.6)  # a few more frames: drawn in place
            return _tmux(socket, "capture-pane", "-p", "-t", "top")
        time.sleep(0.2)
    raise AssertionError(f"{wanted!r} never shown:\n{screen}")


def _running_lines(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if "│ build [" in line]


@pytest.mark.parametrize("width", [80, 120])
def test_two_builds_at_once_have_a_line_each_then_one_last_build(
    tmp_path: Path, width: int
) -> None:
    if subprocess.run(["which", "tmux"], capture_output=True, check=False).returncode:
        assert not in_ci(), "tmux is missing (apt-get install tmux)"
        pytest.skip("tmux not installed")
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    socket = tmp_path / "tmux.sock"
    with detached(home, repo), Client(f"127.0.0.1:{home.grpc_port}") as client:
        builds = {"app-0badcafe": str(uuid.uuid4()), "web-60a40dee": str(uuid.uuid4())}
        prepared = {name: client.prepare(["/bin/sh", "-c", "sleep 25"]) for name in builds}
        threads = [
            threading.Thread(
                target=client.execute,
                args=(prepared[name],),
                kwargs={"metadata": _metadata(invocation, name)},
            )
            for name, invocation in builds.items()
        ]
        for thread in threads:
            thread.start()
        command = (
            f"env -u COLUMNS -u LINES HOME={home.env['HOME']} {sys.executable} -m lre top "
            f"--config {home.config}"
        )
        _tmux(socket, "-f", "/dev/null", "new-session", "-d", "-x", str(width), "-y", "40",
              "-c", str(REPO), "-s", "top", command)  # fmt: skip
        try:
            both = _screen_until(socket, "In flight (2)", timeout=60)
            lines = both.splitlines()
            assert all(len(line) <= width for line in lines)
            for name, invocation in builds.items():
                line = next((x for x in lines if f"build [{name}] {invocation[:8]}" in x), None)
                assert line is not None, both
                assert "running" in line and "last build" not in line, line
            for thread in threads:
                thread.join(60)
            after = _screen_until(socket, "In flight (0)")
            deadline = time.monotonic() + 8  # well under the 10 s a build stayed "running"
            while _running_lines(after) and time.monotonic() < deadline:
                time.sleep(0.3)
                after = _tmux(socket, "capture-pane", "-p", "-t", "top")
            assert _running_lines(after) == [], after
            assert after.count("last build [") == 1, after
        finally:
            subprocess.run(
                ["tmux", "-S", str(socket), "kill-server"], capture_output=True, check=False
            )
