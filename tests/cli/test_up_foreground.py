"""A foreground ``lre up`` on a real terminal (a pty): ``q``, a closed terminal, SIGHUP.

What a user sees: the dashboard on the terminal with what ``lre up`` wrote
kept on top of it; ``q`` stops lre as Ctrl-C does; closing the terminal
(the kernel's SIGHUP) stops it cleanly too, leaving every repository
building locally.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lre.proto import re_pb2
from tests._support.configs import app_config_text
from tests._support.reapi import Client
from tests._support.servers import free_port
from tests.cli._lre import bazel_repo_with_config, run_lre
from tests.cli._terminal import Terminal, start_on_terminal


@contextmanager
def foreground_lre(
    tmp_path: Path, *args: str, status_port: int | None = None
) -> Iterator[tuple[Terminal, Path, Path, dict[str, str]]]:
    """``lre up ARGS`` in a new Bazel repository, its stdin/stdout/stderr a pty
    that is its controlling terminal; waits until it is ready. ``status_port``:
    lre's /status listens there (else it has none)."""
    repo, config, env = bazel_repo_with_config(tmp_path)
    if status_port is not None:
        config.write_text(app_config_text(tmp_path / "lre-root", status_port=status_port))
    env = {**env, "TERM": "xterm", "COLUMNS": "120", "LINES": "40"}
    terminal, reader = start_on_terminal(
        [sys.executable, "-m", "lre", "up", "--config", str(config), *args], cwd=repo, env=env
    )
    process, master = terminal.process, terminal.master
    try:
        deadline = time.monotonic() + 90
        while run_lre("status", "--config", str(config), cwd=repo, env=env).returncode != 0:
            assert process.poll() is None, terminal.output
            assert time.monotonic() < deadline, "lre did not start:\n" + terminal.output
            time.sleep(0.3)
        yield terminal, repo, config, env
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        try:
            os.close(master)
        except OSError:
            pass
        reader.join(10)


def _wait_for(process: subprocess.Popen[bytes], what: str, output: Terminal) -> int:
    try:
        return process.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"lre did not stop after {what}:\n{output.output[-3000:]}") from None


def test_q_stops_lre_and_the_notes_show_on_the_dashboard(tmp_path: Path) -> None:
    with foreground_lre(tmp_path) as (terminal, repo, config, env):
        deadline = time.monotonic() + 30
        # The dashboard took the screen (alternate screen) and shows what lre wrote.
        while True:
            screen = terminal.output.rpartition("\x1b[?1049h")[2]
            if f"wrote {repo / 'lre.bazelrc'}" in screen:
                break
            assert time.monotonic() < deadline, terminal.output[-3000:]
            time.sleep(0.3)
        assert "--remote_executor=grpc://" in (repo / "lre.bazelrc").read_text()
        os.write(terminal.master, b"q")
        code = _wait_for(terminal.process, "q", terminal)
        assert code == 0, terminal.output[-3000:]
        time.sleep(0.5)  # the reader thread catches up
        after = terminal.output.rpartition("\x1b[?1049l")[2]
        assert f"{repo}: builds locally now" in after, after
        assert terminal.output.count(f"wrote {repo / 'lre.bazelrc'}") >= 1
    assert "--remote_executor" not in (repo / "lre.bazelrc").read_text()
    assert run_lre("status", "--config", str(config), cwd=repo, env=env).returncode != 0


def test_closing_the_terminal_stops_lre_cleanly(tmp_path: Path) -> None:
    with foreground_lre(tmp_path) as (terminal, repo, _config, _env):
        os.close(terminal.master)  # the terminal window closed: the kernel sends SIGHUP
        code = _wait_for(terminal.process, "the terminal closed", terminal)
        assert code == 0, terminal.output[-3000:]
    assert "--remote_executor" not in (repo / "lre.bazelrc").read_text()
    assert not (tmp_path / "lre-root" / "state" / "lre.json").exists()


def test_sighup_of_a_plain_foreground_lre_stops_it_cleanly(tmp_path: Path) -> None:
    repo, config, env = bazel_repo_with_config(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "-m", "lre", "up", "--no-tui", "--config", str(config)],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while run_lre("status", "--config", str(config), cwd=repo, env=env).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, "lre did not start"
            time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGHUP)
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output
    assert "SIGHUP received, shutting down" in output
    assert f"{repo}: builds locally now" in output
    assert "--remote_executor" not in (repo / "lre.bazelrc").read_text()


class _Action(threading.Thread):
    """One ``sh -c SCRIPT`` action executed on the foreground lre, from a thread."""

    def __init__(self, port: int, script: str) -> None:
        super().__init__(daemon=True)
        self.port, self.script = port, script
        self.response: re_pb2.ExecuteResponse | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Client(f"127.0.0.1:{self.port}") as client:
                self.response = client.run(["/bin/sh", "-c", self.script])
        except BaseException as error:  # recorded and asserted on below
            self.error = error


def _running(config: Path, repo: Path, env: dict[str, str]) -> int:
    """How many actions the lre of ``config`` runs (``lre ps`` JSON-free: /status)."""
    from lre.cli._daemon import read_pid_file

    server = read_pid_file(tmp_state(config))
    assert server is not None and server.status_address
    with urllib.request.urlopen(f"http://{server.status_address}/status", timeout=5) as reply:
        return int(json.loads(reply.read())["running"])


def tmp_state(config: Path) -> Path:
    return config.parent / "lre-root" / "state"


def _screen(terminal: Terminal) -> str:
    return terminal.output.rpartition("\x1b[?1049h")[2]


def _wait_running(config: Path, repo: Path, env: dict[str, str], action: _Action) -> None:
    deadline = time.monotonic() + 60
    while _running(config, repo, env) < 1:
        assert action.is_alive(), f"the action ended early: {action.error!r}"
        assert time.monotonic() < deadline, "the action never started"
        time.sleep(0.2)


def test_first_ctrl_c_waits_for_the_running_action_then_stops(tmp_path: Path) -> None:
    port = free_port()
    with foreground_lre(tmp_path, "--port", str(port), status_port=free_port()) as (
        terminal,
        repo,
        config,
        env,
    ):
        action = _Action(port, "sleep 6; echo finished")
        action.start()
        _wait_running(config, repo, env, action)
        os.write(terminal.master, b"\x03")  # Ctrl-C: the terminal sends SIGINT
        deadline = time.monotonic() + 20
        while "once its 1 running and 0 queued action(s) finish" not in _screen(terminal):
            assert time.monotonic() < deadline, _screen(terminal)[-3000:]
            time.sleep(0.2)
        assert terminal.process.poll() is None, "lre stopped with an action running"
        action.join(90)
        assert action.error is None, action.error
        assert action.response is not None and action.response.result.exit_code == 0
        assert action.response.result.stdout_raw.strip() == b"finished" or (
            action.response.result.HasField("stdout_digest")
        )
        code = _wait_for(terminal.process, "the action finished", terminal)
        assert code == 0, terminal.output[-3000:]


def test_a_second_key_within_seconds_cancels_what_runs(tmp_path: Path) -> None:
    port = free_port()
    with foreground_lre(tmp_path, "--port", str(port), status_port=free_port()) as (
        terminal,
        repo,
        config,
        env,
    ):
        action = _Action(port, "sleep 120")
        action.start()
        _wait_running(config, repo, env, action)
        os.write(terminal.master, b"q")
        deadline = time.monotonic() + 20
        while "again within 5 s cancels them" not in _screen(terminal):
            assert time.monotonic() < deadline, _screen(terminal)[-3000:]
            time.sleep(0.2)
        os.write(terminal.master, b"\x03")
        code = _wait_for(terminal.process, "the second key", terminal)
        assert code == 0, terminal.output[-3000:]
        action.join(60)
        assert (
            action.response is None
            or action.response.result.exit_code != 0
            or (action.response.status.code != 0)
        ), "the 120 s action was not cancelled"
